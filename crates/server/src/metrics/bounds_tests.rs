use super::*;

#[test]
fn counts_every_hit_and_logs_the_first() {
    let m = Metrics::default();
    assert!(m.bound_hit(Bound::Shed, 1));
    assert!(!m.bound_hit(Bound::Shed, 2), "within LOG_EVERY: not again");
    assert!(
        m.bound_hit(Bound::Abandoned, 1),
        "each bound logs on its own"
    );
    assert_eq!(m.bound_hits(Bound::Shed), 3);
    let text = m.render();
    assert!(
        text.contains("sluice_bound_hits_total{bound=\"shed\"} 3"),
        "{text}"
    );
}
