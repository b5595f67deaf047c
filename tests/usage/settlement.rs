//! Settlements across instances: one clears the other's refusal, and a spent key cannot skip its reservation.

use super::*;

#[test]
fn a_settlement_clears_a_refusal_on_the_other_instance() {
    if common::stack::envoy_below(USAGE_ENVOY, "envoy/usage.yaml") {
        return;
    }
    let fleet = Fleet::start();
    room_in_window(60, 25);
    let key = [
        ("x-api-key", "team-c"),
        ("x-max-tokens", "600"),
        ("x-tokens", "100"),
    ];
    // One reservation of 600 in flight through Envoy 0; a second of 600
    // through Envoy 1 does not fit.
    fleet.gate("shut");
    std::thread::scope(|s| {
        let fleet = &fleet;
        let slow = s.spawn(move || {
            let mut h = key.to_vec();
            h.push(("x-hold", "1"));
            fleet.post(0, "/v1/reserved/chat/completions", &h).status
        });
        let reserved = eventually(Duration::from_secs(5), || {
            fleet.counted("total_hits", RESERVED) >= 600
        });
        let second = fleet.post(1, "/v1/reserved/chat/completions", &key).status;
        fleet.gate("open");
        assert!(reserved, "the first reservation never landed");
        assert_eq!(second, 429);
        assert_eq!(slow.join().expect("slow"), 200);
    });
    // Settled on sluice 0 (600 back, 100 charged): sluice 1's very next
    // answer sees it, though it refused this key a moment ago.
    assert!(eventually(Duration::from_secs(10), || fleet
        .counted("refunded_hits", RESERVED)
        == 1200));
    assert_eq!(
        fleet.post(1, "/v1/reserved/chat/completions", &key).status,
        200
    );
}

/// Envoy drops a descriptor whose `hits_addend` is not a number from 0 to
/// 10^9, and then asks nothing for it: with the estimate taken from a header
/// the client writes, a key that has spent its whole budget skipped its
/// reservation by sending one Envoy cannot read. The shipped route admits
/// only a well-formed estimate; anything else is a 400 before it costs.
#[test]
fn a_spent_key_cannot_skip_its_reservation_with_an_estimate_envoy_cannot_read() {
    if common::stack::envoy_below(USAGE_ENVOY, "envoy/usage.yaml") {
        return;
    }
    let fleet = Fleet::start();
    room_in_window(60, 25);
    // 1,100 of 1,000 spent: a reservation of 100, settled at 1,100 used.
    let spend = [
        ("x-api-key", "skipper"),
        ("x-max-tokens", "100"),
        ("x-tokens", "1100"),
    ];
    assert_eq!(fleet.post(0, "/v1/reserved/chat/c", &spend).status, 200);
    assert!(
        eventually(Duration::from_secs(10), || fleet
            .counted("total_hits", RESERVED)
            == 1200),
        "{}",
        fleet.counted("total_hits", RESERVED)
    );
    let well_formed = [("x-api-key", "skipper"), ("x-max-tokens", "1")];
    assert_eq!(
        fleet.post(1, "/v1/reserved/chat/c", &well_formed).status,
        429
    );
    let served = fleet.served();
    for estimate in [
        "abc",
        "-1000",
        "18446744073709551615",
        "99999999999999999999999",
        "1000000000",
        "1e3",
        "",
    ] {
        for envoy in 0..2 {
            let seen = fleet.post(
                envoy,
                "/v1/reserved/chat/c",
                &[("x-api-key", "skipper"), ("x-max-tokens", estimate)],
            );
            assert_eq!(seen.status, 400, "estimate {estimate:?} on envoy {envoy}");
        }
    }
    assert_eq!(fleet.served(), served, "none of them reached the model");
    // Well-formed estimates of other keys are asked for as before: the
    // largest one is refused, a small one passes.
    let big = [("x-api-key", "big"), ("x-max-tokens", "999999999")];
    assert_eq!(fleet.post(0, "/v1/reserved/chat/c", &big).status, 429);
    let small = [("x-api-key", "small"), ("x-max-tokens", "0007")];
    assert_eq!(fleet.post(1, "/v1/reserved/chat/c", &small).status, 200);
}
