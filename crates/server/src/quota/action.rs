//! Assignments as Envoy reads them: a `BucketAction` for one bucket.

use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket as PbBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};

use super::share::Assignment;

/// `a` for bucket `id`, holding for `ttl` (whole seconds, at least one).
/// The bucket id Envoy knows a bucket by, from its sorted entries.
pub(super) fn bucket_id(key: &[(String, String)]) -> BucketId {
    BucketId {
        bucket: key.iter().cloned().collect(),
    }
}

pub(super) fn assignment(id: BucketId, a: &Assignment, ttl: Duration) -> BucketAction {
    let strategy = match a {
        Assignment::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        Assignment::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        Assignment::Bucket(b) => Strategy::TokenBucket(PbBucket {
            max_tokens: b.max_tokens,
            tokens_per_fill: Some(UInt32Value {
                value: b.tokens_per_fill,
            }),
            fill_interval: Some(PbDuration {
                seconds: i64::from(b.fill_interval_seconds),
                nanos: 0,
            }),
        }),
    };
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            // Envoy reads whole seconds: below one the assignment would
            // expire at once.
            assignment_time_to_live: Some(PbDuration {
                seconds: i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX),
                nanos: 0,
            }),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}
