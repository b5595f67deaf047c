//! Every instance's log, kept for `CHAOS_HISTORY` beside the history: a
//! violation's instance says there what it did (its store calls, its
//! clock readings, the rules it was given), which the history cannot.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::common::Sluice;

/// One process's log lines, as its [`Sluice`] collects them.
type Lines = Arc<Mutex<Vec<String>>>;

/// The log lines of each process an instance ran as, in start order.
#[derive(Default)]
pub struct Logs(Mutex<Vec<(usize, Lines)>>);

impl Logs {
    /// Keeps the log of `s`, which runs as instance `i`.
    pub fn keep(&self, i: usize, s: &Sluice) {
        self.0.lock().expect("logs").push((i, s.logs.clone()));
    }

    /// Writes `<prefix>-instance-<i>-<n>.log`, one per process.
    pub fn save(&self, prefix: &Path) {
        for (n, (i, lines)) in self.0.lock().expect("logs").iter().enumerate() {
            let text = lines.lock().map(|l| l.join("\n")).unwrap_or_default();
            let path = format!("{}-instance-{i}-{n}.log", prefix.display());
            let _ = std::fs::write(path, text);
        }
    }

    /// Each instance's lines that hold `needle`, as `instance i: line`.
    pub fn matching(&self, needle: &str) -> Vec<String> {
        let logs = self.0.lock().expect("logs");
        let mut out = Vec::new();
        for (i, lines) in logs.iter() {
            // Only the lines that match are copied, not the whole log.
            if let Ok(lines) = lines.lock() {
                out.extend(
                    lines
                        .iter()
                        .filter(|l| l.contains(needle))
                        .map(|l| format!("instance {i}: {l}")),
                );
            }
        }
        out
    }
}
