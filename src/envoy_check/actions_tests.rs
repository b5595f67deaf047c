use super::*;
use serde_json::json;

#[test]
fn actions_become_entries_with_their_absent_inputs() {
    let d = descriptor(
        &json!({"actions": [
                {"generic_key": {"descriptor_key": "tier", "descriptor_value": "api"}},
                {"request_headers": {"header_name": "X-User", "descriptor_key": "user"}},
                {"query_parameters": {"query_parameter_name": "k", "descriptor_key": "k", "skip_if_absent": true}},
                {"destination_cluster": {}},
                {"extension": {"name": "x"}}
            ], "hits_addend": {"format": "%REQ(X-Max-Tokens)%"}, "colour": 1}),
        Some("upstream"),
    );
    assert_eq!(d.entries.len(), 4);
    assert_eq!(
        d.entries[1].absent,
        Absent::Dropped("header x-user absent".into())
    );
    assert!(matches!(d.entries[2].absent, Absent::Skipped(_)));
    assert_eq!(d.entries[3].value, Source::Fixed("upstream".into()));
    assert_eq!(d.not_understood, ["field colour", "action extension"]);
    assert_eq!(
        d.hits,
        Hits::Format {
            text: "%REQ(X-Max-Tokens)%".into(),
            client: Some(Input::Header("x-max-tokens".into()))
        }
    );
    assert_eq!(
        client_input("%QUERY_PARAM(n)%"),
        Some(Input::Query("n".into()))
    );
    assert_eq!(client_input("%RESP(x-usage)%"), None);
}
