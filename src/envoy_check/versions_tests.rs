use super::*;

#[test]
fn versions_read_as_written_and_order_by_minor() {
    for (text, want) in [
        ("1.39", v(1, 39)),
        ("1.39.3", v(1, 39)),
        ("v1.40.0", v(1, 40)),
    ] {
        assert_eq!(text.parse::<EnvoyVersion>(), Ok(want), "{text}");
    }
    assert!("latest".parse::<EnvoyVersion>().is_err());
    assert!(v(1, 9) < v(1, 36) && v(1, 39) < STREAM_DONE);
}

#[test]
fn a_config_dump_says_its_version() {
    let dump = serde_json::json!({"configs": [
        {"bootstrap": {"node": {"user_agent_build_version": {"version": {"major_number": 1, "minor_number": 37}}}}}
    ]});
    assert_eq!(of(&dump), Some(v(1, 37)));
    assert_eq!(of(&serde_json::json!({"static_resources": {}})), None);
}
