use super::*;

#[test]
fn templates_parse_and_fill_in_the_value() {
    let t: Template = "tier=api,remote_address=10.0.{n}".parse().unwrap();
    let plan = LoadPlan {
        target: String::new(),
        domain: "api".into(),
        descriptors: vec![t],
        keys: 10,
        concurrency: 1,
        connections: 1,
        duration: Duration::from_secs(1),
        requests: None,
        rate: None,
    };
    let r = request(&plan, 7);
    assert_eq!(r.descriptors[0].entries[1].value, "10.0.7");
    assert!("novalue".parse::<Template>().is_err());
    assert!("=v".parse::<Template>().is_err());
}

#[test]
fn percentiles_are_ranks_of_the_sorted_latencies() {
    let r = Report {
        latencies: (1..=1000).collect(),
        ok: 1000,
        ..Default::default()
    };
    assert_eq!(r.percentile(0.5), Duration::from_micros(500));
    assert_eq!(r.percentile(0.99), Duration::from_micros(990));
    assert_eq!(r.percentile(0.999), Duration::from_micros(999));
    assert_eq!(r.percentile(1.0), Duration::from_micros(1000));
}
