//! A process stopped and continued on a cycle, as a CPU quota throttles a
//! pod: it answers everything, late.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use super::send_signal;

/// Stops and continues a process on a cycle until dropped (then leaves it
/// running).
pub struct Throttle {
    pid: u32,
    on: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Throttle {
    pub fn start(pid: u32, run: Duration, stopped: Duration) -> Throttle {
        let on = Arc::new(AtomicBool::new(true));
        let thread = std::thread::spawn({
            let on = on.clone();
            move || {
                while on.load(Relaxed) {
                    send_signal(pid, "STOP");
                    std::thread::sleep(stopped);
                    send_signal(pid, "CONT");
                    std::thread::sleep(run);
                }
            }
        });
        Throttle {
            pid,
            on,
            thread: Some(thread),
        }
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.on.store(false, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        send_signal(self.pid, "CONT");
    }
}
