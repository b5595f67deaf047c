//! A token bucket charged after each response, with `overdraft: true`.

use super::*;

/// The same pattern on a token bucket with `overdraft: true`: the charge
/// that does not fit is taken all the same (the request already ran), the
/// bucket goes into debt, and every later check is refused until refill
/// pays it back. Without it, a bucket refused that charge and took nothing,
/// so the checks kept passing and a quarter of what was used went unpaid.
#[test]
fn a_bucket_charged_after_each_response_takes_every_charge_into_debt() {
    if common::stack::envoy_below(USAGE_ENVOY, "envoy/usage.yaml") {
        return;
    }
    // An hour's bucket: refill (0.28 tokens a second) cannot pay the debt
    // back while the test runs, however slowly it runs.
    let fleet = Fleet::start_with(|rules| {
        rules
            .replace("max_in_flight: 5", "max_in_flight: 100")
            .replacen(
                "rate_limit: {unit: minute, requests_per_unit: 1000}",
                "rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: token_bucket, overdraft: true}",
                1,
            )
    });
    room_in_window(3600, 60);
    let headers = [("x-api-key", "team-a"), ("x-tokens", "300")];
    let mut spent = 0;
    for i in 0..4 {
        let seen = fleet.post(i % 2, "/v1/chat/completions", &headers);
        assert_eq!(seen.status, 200, "request {i} with {spent} spent");
        spent += 300;
        assert!(
            eventually(Duration::from_secs(10), || fleet
                .counted("total_hits", AFTER)
                == spent),
            "charged {} of {spent}",
            fleet.counted("total_hits", AFTER)
        );
    }
    // 1,200 taken of 1,000: in debt, so every check is refused, on both.
    for envoy in 0..2 {
        let seen = fleet.post(envoy, "/v1/chat/completions", &headers);
        assert_eq!(seen.status, 429, "{seen:?}");
        let wait = seen.retry_after.expect("Retry-After");
        // About 200 tokens of refill at 1,000 an hour: 12 minutes.
        assert!((600..=760).contains(&wait), "{wait}");
    }
    // The store took every token reported: its bucket's usage of the
    // window is the 1,200 charged.
    let taken: Vec<String> = fleet
        ._redis
        .cli(&["--scan"])
        .lines()
        .map(|k| fleet._redis.cli(&["get", k]).trim().to_owned())
        .filter(|v| v.matches(':').count() == 2)
        .collect();
    assert!(
        taken.iter().any(|v| v.ends_with(":1200")),
        "the bucket's record: {taken:?}"
    );
}
