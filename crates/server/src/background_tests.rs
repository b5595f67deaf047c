use super::*;

/// This thread's nice value, from `/proc/thread-self/stat` (field 19).
fn nice_here() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(16)?.parse().ok()
}

/// This thread's scheduling policy, from `/proc/thread-self/stat` (field 41).
fn policy_here() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(38)?.parse().ok()
}

#[test]
fn background_work_runs_lowered_and_requests_keep_their_priority() {
    // The test may itself run niced (`nice cargo test`).
    let Some(caller) = nice_here() else {
        return; // not Linux
    };
    let (tx, rx) = std::sync::mpsc::channel();
    for nice in [0u8, 10, LOWEST, 20] {
        let tx = tx.clone();
        spawn("test-background", nice, move || {
            let _ = tx.send((nice, nice_here(), policy_here()));
        })
        .unwrap();
    }
    let mut seen: Vec<_> = (0..4).map(|_| rx.recv().unwrap()).collect();
    seen.sort();
    // SCHED_IDLE is policy 5; SCHED_OTHER 0. A nice value is at least
    // what was asked (a niced caller's threads may start nicer).
    assert_eq!(
        seen[0],
        (0, Some(caller), Some(0)),
        "0 leaves the thread as it starts"
    );
    for (asked, nice, policy) in &seen[1..3] {
        assert!(nice.unwrap() >= i64::from(*asked), "{seen:?}");
        assert_eq!(*policy, Some(0), "{seen:?}");
    }
    assert_eq!(seen[3].2, Some(5), "20 is SCHED_IDLE: {seen:?}");
    assert_eq!(nice_here(), Some(caller), "the caller is left as it was");
}

#[test]
fn background_work_leaves_a_core_to_requests() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(
        threads(),
        cores,
        "a load at startup or a check uses every core"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    spawn("test-background", 0, move || {
        let _ = tx.send(threads());
    })
    .unwrap();
    assert_eq!(rx.recv().unwrap(), cores.saturating_sub(1).max(1));
}
