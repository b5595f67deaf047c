//! Concurrency limits across the fleet: a crash leaks no slot, and the model queues a burst it is too busy to accept.

use super::*;

/// How many streams the model holds open now.
fn in_flight(fleet: &Fleet) -> u64 {
    fleet.llm("now")
}

/// At most three requests of a key in flight across both Envoys and both
/// sluices: of eight slow ones exactly three reach the model; their slots
/// come back when their streams end, and those of an Envoy killed mid-stream
/// come back when their lease ends.
#[test]
fn a_concurrency_limit_holds_across_the_fleet_and_a_crash_leaks_no_slot() {
    if common::stack::envoy_below(USAGE_ENVOY, "envoy/usage.yaml") {
        return;
    }
    let mut fleet = Fleet::start_with(|rules| {
        rules
            .replace("max_in_flight: 5", "max_in_flight: 3")
            .replace("lease: 10m", "lease: 4s")
    });
    room_in_window(60, 30);
    let slow = [("x-api-key", "agent"), ("x-tokens", "1")];
    let before = fleet.served();
    let passed = fleet.held(8, 3, "/v1/chat/completions", &slow);
    assert_eq!(passed, 3);
    assert_eq!(
        fleet.served() - before,
        3,
        "exactly three reached the model"
    );
    // Their streams ended and gave their slots back: three more pass at once.
    let quick = [("x-api-key", "agent"), ("x-tokens", "1")];
    assert!(eventually(Duration::from_secs(10), || {
        fleet.post(0, "/v1/chat/completions", &quick).status == 200
    }));

    // Three streams through Envoy 1, which dies before any of them ends.
    let pid = fleet.envoys[1].0.id();
    let held = [
        ("x-api-key", "crash"),
        ("x-tokens", "1"),
        ("x-delay-ms", "20000"),
    ];
    std::thread::scope(|s| {
        for _ in 0..3 {
            let fleet = &fleet;
            s.spawn(move || fleet.try_post(1, "/v1/chat/completions", &held));
        }
        assert!(eventually(Duration::from_secs(10), || in_flight(&fleet) >= 3));
        assert!(common::send_signal(pid, "KILL"), "kill envoy 1");
    });
    let _ = fleet.envoys[1].0.wait();
    // No release ever comes: the key is full until the leases end, then free.
    let probe = [("x-api-key", "crash"), ("x-tokens", "1")];
    assert_eq!(fleet.post(0, "/v1/chat/completions", &probe).status, 429);
    assert!(
        eventually(Duration::from_secs(15), || fleet
            .post(0, "/v1/chat/completions", &probe)
            .status
            == 200),
        "the crashed Envoy's slots never came back"
    );
}

/// The model (and the demo upstream, whose server it shares) queues a burst
/// of new connections while it is too busy to accept them. Python's default
/// backlog of 5 dropped the rest; a dropped SYN is resent only after 1 s,
/// Envoy's connect timeout for the model, so a held request in a CI run got
/// 503 instead of reaching the model.
#[test]
fn the_model_queues_a_burst_of_connections_it_is_too_busy_to_accept() {
    if common::stack::envoy_below(USAGE_ENVOY, "envoy/usage.yaml") {
        return;
    }
    let (mut llm, port) = start_script("envoy/llm.py");
    // Stopped, it accepts nothing: only the kernel's queue holds connections.
    assert!(common::send_signal(llm.id(), "STOP"), "stop the model");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let burst = 20;
    let queued: Vec<_> = (0..burst)
        .filter_map(|_| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()
        })
        .collect();
    assert!(common::send_signal(llm.id(), "CONT"), "resume the model");
    let _ = llm.kill();
    let _ = llm.wait();
    assert_eq!(queued.len(), burst, "connections the kernel queued");
}
