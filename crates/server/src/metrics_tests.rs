//! Rendering and bounds of the metrics.

use super::*;

#[test]
fn rule_counters_survive_lookup_and_render() {
    let m = Metrics::default();
    let s = m.rule("d", "k_v");
    s.add(&StatDelta {
        total_hits: 3,
        over_limit: 1,
        ..StatDelta::default()
    });
    assert!(Arc::ptr_eq(&s, &m.rule("d", "k_v")));
    let text = m.render();
    assert!(text.contains("sluice_rule_total_hits_total{domain=\"d\",rule=\"k_v\"} 3"));
    assert!(text.contains("sluice_rule_over_limit_total{domain=\"d\",rule=\"k_v\"} 1"));
}

#[test]
fn detailed_labels_are_bounded_in_count_and_bytes() {
    let m = Metrics::with_limits(MetricBounds {
        detailed_sets: 2,
        label_bytes: 8,
        ..MetricBounds::default()
    });
    let rule = m.rule("d", "k");
    let a = m.detailed("d", "k_a", &rule);
    assert!(!Arc::ptr_eq(&a, &rule));
    assert!(Arc::ptr_eq(&a, &m.detailed("d", "k_a", &rule)));
    assert!(Arc::ptr_eq(&m.detailed("d", "k_long_value", &rule), &rule));
    let _b = m.detailed("d", "k_b", &rule);
    assert!(Arc::ptr_eq(&m.detailed("d", "k_c", &rule), &rule));
    assert!(!m.render().contains("k_long"));
}

/// A million configured rules cost a scrape nothing until they count: only
/// rules with traffic have series, at most --max-rule-series (the busiest),
/// the rest counted as omitted. Before, every configured rule had six
/// series from the start.
#[test]
fn rule_series_are_those_with_traffic_and_bounded() {
    let m = Metrics::with_limits(MetricBounds {
        rule_series: 2,
        ..MetricBounds::default()
    });
    let rules: Vec<_> = (0..1_000).map(|i| m.rule("d", &format!("c_{i}"))).collect();
    assert!(!m.render().contains("rule=\"c_"), "no traffic, no series");
    for (i, r) in rules.iter().take(5).enumerate() {
        r.total_hits
            .fetch_add(10 + i as u64, std::sync::atomic::Ordering::Relaxed);
    }
    let text = m.render();
    assert_eq!(
        text.matches("sluice_rule_total_hits_total{").count(),
        2,
        "{text}"
    );
    assert!(
        text.contains("rule=\"c_4\"} 14") && text.contains("rule=\"c_3\"} 13"),
        "the busiest: {text}"
    );
    assert!(text.contains("sluice_rule_series_omitted 3"), "{text}");
}

#[test]
fn histogram_is_cumulative() {
    let m = Metrics::default();
    m.request(Outcome::Ok, Duration::from_micros(30));
    m.request(Outcome::OverLimit, Duration::from_millis(3));
    let text = m.render();
    assert!(text.contains("sluice_request_duration_seconds_bucket{le=\"5e-05\"} 1"));
    assert!(text.contains("sluice_request_duration_seconds_bucket{le=\"0.005\"} 2"));
    assert!(text.contains("sluice_requests_total{code=\"over_limit\"} 1"));
}

#[test]
fn series_of_rules_no_longer_in_force_are_pruned_but_detailed_ones_stay() {
    use std::sync::atomic::Ordering::Relaxed;
    let m = Metrics::default();
    let kept = m.rule("d", "d.kept");
    kept.total_hits.fetch_add(1, Relaxed);
    m.rule("d", "d.gone").total_hits.fetch_add(1, Relaxed);
    let detailed = m.detailed("d", "d.k_v", &kept);
    detailed.total_hits.fetch_add(1, Relaxed);
    drop(detailed);
    m.prune_rules();
    let text = m.render();
    assert!(text.contains("rule=\"d.kept\""), "{text}");
    assert!(text.contains("rule=\"d.k_v\""), "{text}");
    assert!(!text.contains("rule=\"d.gone\""), "{text}");
}
