use super::*;

#[test]
fn a_quiet_envoy_claims_under_half_again_its_rate_and_a_busy_one_little_more() {
    let mut quiet = Estimate::default();
    let mut busy = Estimate::default();
    // 0.5 and 18 per second, reported every 5 s (2 and 3 requests in
    // turn for the quiet one).
    for i in 0..8 {
        quiet.add(if i % 2 == 0 { 2 } else { 3 }, 5.0);
        busy.add(90, 5.0);
    }
    assert!((quiet.rate() - 0.5).abs() < 0.05, "{}", quiet.rate());
    let q = quiet.claim() / quiet.rate();
    assert!((1.2..1.6).contains(&q), "quiet claims {q}x");
    let b = busy.claim() / busy.rate();
    assert!((1.0..1.2).contains(&b), "busy claims {b}x");
    // Smoothed: one report of 2 and one of 3 move the claim little.
    let mut a = quiet;
    let mut b = quiet;
    a.add(2, 5.0);
    b.add(3, 5.0);
    assert!((a.claim() - b.claim()).abs() / b.claim() < 0.15);
}

#[test]
fn nothing_measured_claims_nothing_and_garbage_is_ignored() {
    let mut e = Estimate::default();
    assert!(!e.known());
    e.add(5, 0.0);
    e.add(5, f64::NAN);
    assert!(!e.known());
    assert_eq!(e.claim(), 0.0);
    e.add(0, 5.0);
    assert!(
        e.known(),
        "an idle Envoy is known, and the split's floor keeps it a share"
    );
    assert_eq!(e.claim(), 0.0);
}
