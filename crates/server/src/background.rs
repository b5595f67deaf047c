//! Work that must not slow requests: a walk of every rule, a reload's
//! compile. It runs on a thread of its own at a lower CPU priority, so on a
//! small host it takes the cores requests leave idle instead of sharing them
//! equally, and a request that wakes finds its core at once.

/// The lowest nice value: what the console's once-a-second walk of every
/// rule runs at (under a flood it still gets a share, so the console keeps
/// showing the flood).
pub(crate) const LOWEST: u8 = 19;

/// Lowers the calling thread's CPU priority (Linux keeps one per thread;
/// threads it starts inherit it): `nice` 1 to 19, or 20 for SCHED_IDLE
/// (Linux treats it as nice 20: the thread runs only on a core nothing else
/// wants); 0 leaves it. Where it cannot be lowered, the work runs as it is.
pub(crate) fn lower(nice: u8) {
    if nice >= 20 {
        use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let me = thread_priority::thread_native_id();
        let _ = thread_priority::set_thread_priority_and_policy(me, ThreadPriority::Min, idle);
    } else if nice > 0 {
        let _ = rustix::process::setpriority_process(None, i32::from(nice));
    }
}

thread_local! {
    /// Set on a thread started by [`spawn`]: its work shares the host with
    /// requests.
    static BEHIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How many threads work that can be split (parsing rule files) may use
/// from here: every core, but one less on a background thread, so a request
/// that wakes while a reload parses finds a core idle instead of waiting
/// for the scheduler to take one back from the reload.
pub(crate) fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if BEHIND.with(std::cell::Cell::get) {
        cores.saturating_sub(1).max(1)
    } else {
        cores
    }
}

/// Starts `work` on a thread named `name` at `nice` (see [`lower`]); an
/// error when the thread could not start.
pub(crate) fn spawn(
    name: &str,
    nice: u8,
    work: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            lower(nice);
            BEHIND.with(|b| b.set(true));
            work();
        })
        .map(drop)
}

#[cfg(test)]
#[path = "background_tests.rs"]
mod tests;
