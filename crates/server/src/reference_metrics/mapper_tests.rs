use super::*;

const EG: &str = r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.total_hits"
    match_type: regex
    name: "ratelimit_service_rate_limit_total_hits"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"
  - match: "ratelimit.service.noise"
    action: drop
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    match_metric_type: observer
"#;

#[test]
fn globs_first_then_regexes_and_the_rest_escaped() {
    let m = Mapper::parse("eg.yaml", EG).unwrap();
    let label = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        m.map("ratelimit.service.rate_limit.api.remote_address.total_hits"),
        Some((
            "ratelimit_service_rate_limit_total_hits".into(),
            vec![label("domain", "api"), label("key1", "remote_address")]
        ))
    );
    assert_eq!(
        m.map("ratelimit.service.rate_limit.api.route_r1.user.total_hits"),
        Some((
            "ratelimit_service_rate_limit_total_hits".into(),
            vec![
                label("domain", "api"),
                label("key1", "route_r1"),
                label("key2", "user")
            ]
        ))
    );
    assert_eq!(m.map("ratelimit.service.noise"), None);
    assert_eq!(
        m.map("ratelimit.service.config_load_success"),
        Some(("ratelimit_service_config_load_success".into(), vec![]))
    );
    assert!(Mapper::parse("x", "mappings: [{match: a, match_type: fuzzy, name: b}]").is_err());
}
