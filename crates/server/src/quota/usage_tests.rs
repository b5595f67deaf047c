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

/// `time_elapsed` may be sub-second and carry nanoseconds: such a report is
/// measured and marked exact; whole seconds are marked as such; a first
/// report (0) is not measured.
#[test]
fn sub_second_and_nanosecond_intervals_are_measured() {
    let mut r = report(25, 0);
    r.time_elapsed = Some(PbDuration {
        seconds: 0,
        nanos: 250_000_000,
    });
    let m = Usage::check(r).expect("ok").measured.expect("measured");
    assert_eq!((m.requests, m.seconds, m.whole_seconds), (25, 0.25, false));
    let m = Usage::check(report(10, 5))
        .expect("ok")
        .measured
        .expect("measured");
    assert!(m.whole_seconds);
    assert!(Usage::check(report(1, 0)).expect("ok").measured.is_none());
}
