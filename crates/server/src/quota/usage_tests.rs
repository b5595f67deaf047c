use super::*;
use envoy_types::pb::google::protobuf::Duration as PbDuration;

fn report(allowed: u64, seconds: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: [("k".to_string(), "v".to_string())].into(),
        }),
        time_elapsed: Some(PbDuration { seconds, nanos: 0 }),
        num_requests_allowed: allowed,
        num_requests_denied: 0,
    }
}

#[test]
fn a_count_no_interval_can_hold_is_refused_even_under_a_second() {
    assert!(matches!(
        Usage::check(report(u64::MAX, 0)),
        Err(Skip::BadCounts)
    ));
    assert!(matches!(
        Usage::check(report(20_000_000, 1)),
        Err(Skip::BadCounts)
    ));
    assert!(Usage::check(report(5_000_000, 0)).is_ok());
    assert!(Usage::check(report(40_000_000, 5)).is_ok());
}
