use super::*;

#[test]
fn shares_sum_to_the_fleets_figures() {
    // Instance a counted one key up to 40; b crossed levels 1 and 3 of
    // two more keys, and took a's key back below 2 (a refund): b's
    // share at level 2 is below 0.
    let a = json!({"domain": "d", "rules": [{"rule": "ip", "limit": 2, "hits": 50,
            "at_least": [[1, 1], [2, 1], [3, 1], [40, 1]]}]});
    let b = json!({"domain": "d", "rules": [{"rule": "ip", "limit": 2, "hits": 6,
            "at_least": [[1, 2], [2, -1], [3, 2]]}]});
    let m = merge(&[a, b]);
    let r = &m["domains"][0]["rules"][0];
    assert_eq!(r["hits"], 56);
    assert_eq!(r["usage"]["keys"], 3);
    assert_eq!(r["refused_by_limit"]["keys"], 3, "{r}");
    assert_eq!(r["usage"]["max"], 40);
    assert_eq!(r["at_least"][1], json!([2, 0]), "{r}");
    assert_eq!(m["domains"][0]["instances"], 2);
}
