use super::*;
use serde_json::json;

#[test]
fn a_number_is_only_a_bounded_run_of_digits() {
    let m = |re: &str| json!({"headers": [{"name": "X-Max-Tokens", "string_match": {"safe_regex": {"regex": re}}}]});
    assert!(admits_only_numbers(&m("[0-9]{1,9}"), "x-max-tokens"));
    assert!(admits_only_numbers(&m("^\\d{1,6}$"), "x-max-tokens"));
    assert!(
        !admits_only_numbers(&m("[0-9]+"), "x-max-tokens"),
        "unbounded"
    );
    assert!(
        !admits_only_numbers(&m("[0-9]{1,20}"), "x-max-tokens"),
        "past 10^9"
    );
    assert!(!admits_only_numbers(&m(".*"), "x-max-tokens"));
    assert!(!admits_only_numbers(
        &json!({"headers": [{"name": "x-max-tokens", "present_match": true}]}),
        "x-max-tokens"
    ));
    let q = json!({"query_parameters": [{"name": "n", "string_match": {"safe_regex": {"regex": "[0-9]{1,3}"}}}]});
    assert!(admits_only_number_params(&q, "n"));
}
