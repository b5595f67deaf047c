use std::io::{BufRead, BufReader, Write};

use super::*;
use crate::Primary;

/// How late the stand-in answers a count: past the callers' wait.
const LATE: Duration = Duration::from_millis(80);

/// A memcached that answers the probe at once and every count `LATE`,
/// which a real one will not do on demand.
fn late_memcached() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let Ok(mut out) = conn.try_clone() else {
                    return;
                };
                for line in BufReader::new(conn).lines().map_while(Result::ok) {
                    if !line.contains("probe") {
                        std::thread::sleep(LATE);
                    }
                    let reply = if line.contains("probe") {
                        "NOT_FOUND"
                    } else {
                        "1"
                    };
                    if out.write_all(format!("{reply}\r\n").as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The fault harness's request flood on memcached (seed 3): every caller
/// gave up before its answer came, nobody read one, and a memcached that
/// answered every call was taken for silent, tripping the breaker. Each
/// given-up call's answer is listened for now, so the store is heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_answering_only_callers_that_left_is_heard() {
    let store = MemcacheStore::new(MemcacheConfig {
        servers: vec![late_memcached()],
        prefix: String::new(),
        pool_size: 2,
        connect_timeout: Duration::from_secs(2),
    })
    .expect("store");
    store.probe().await.expect("probe");
    let inc = Increment::test_hit("v", 10, 60_000_000);
    for _ in 0..3 {
        let gave_up = tokio::time::timeout(LATE / 4, store.increment(&[&inc])).await;
        assert!(gave_up.is_err(), "answered within the wait: {gave_up:?}");
    }
    // Heard: nothing owed any more, so no wait is put down to silence.
    let heard = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        store
            .hearing(Duration::ZERO)
            .is_some_and(|h| h.silent.is_none())
    });
    assert!(
        heard,
        "{:?} though every call was answered {LATE:?} late",
        store.hearing(Duration::ZERO)
    );
    assert_eq!(store.stalled(LATE, Duration::ZERO), Some(false));
}
