//! What the benches read about a process and their settings: the
//! environment, CPU time, resident memory, open descriptors.

#![allow(
    dead_code,
    reason = "each bench that includes this reads only some of it"
)]

/// `name` from the environment as a number, or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Resident memory of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// (open file descriptors, of which sockets) of `pid`.
pub fn fds(pid: u32) -> (usize, usize) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let links: Vec<_> = dir
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect();
    let sockets = links
        .iter()
        .filter(|l| l.to_string_lossy().starts_with("socket:"))
        .count();
    (links.len(), sockets)
}

/// CPU seconds (user + system) a process has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}
