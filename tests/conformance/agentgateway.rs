//! A client other than Envoy, as agentgateway's remote rate limit calls
//! (its `remoteratelimit.rs`): the request-level `hits_addend` left 0 and a
//! per-descriptor one set on every descriptor of a token limit (the cost,
//! an explicit 0 to check without charging), none on a request limit; after
//! an LLM response, the same descriptors again with the tokens used, the
//! answer ignored. Which shapes keep that refused charge is what makes a
//! token budget hold.

use common::{OK, OVER, Sluice};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;

use super::common;

const RULES: &str = r#"
domain: agentgateway
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tokens
    value: fixed
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: tokens
    value: bucket
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket}
  - key: tokens
    value: overdraft
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, overdraft: true}
"#;

fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..common::descriptor(entries)
    }
}

/// One call as agentgateway makes it: request-level hits 0.
async fn call(c: &mut common::Client, descriptors: Vec<RateLimitDescriptor>) -> (i32, Vec<u32>) {
    let r = c
        .should_rate_limit(RateLimitRequest {
            domain: "agentgateway".into(),
            descriptors,
            hits_addend: 0,
        })
        .await
        .unwrap_or_else(|s| panic!("rpc: {s}"))
        .into_inner();
    let remaining = r.statuses.iter().map(|s| s.limit_remaining).collect();
    (r.overall_code, remaining)
}

/// A request limit's descriptor carries no hits (and the request 0): one
/// hit each, as "not set" means. A token limit's carries the cost, and 0
/// checks without charging.
#[tokio::test]
async fn unset_hits_count_one_and_an_explicit_zero_checks_without_charging() {
    let s = Sluice::start(&[("ag.yaml", RULES)], &[]);
    let mut c = s.client().await;
    let user = [("user", "u1")];
    for remaining in [2, 1, 0] {
        assert_eq!(
            call(&mut c, vec![descriptor(&user, None)]).await,
            (OK, vec![remaining])
        );
    }
    assert_eq!(call(&mut c, vec![descriptor(&user, None)]).await.0, OVER);
    let tokens = [("tokens", "fixed"), ("user", "u1")];
    for _ in 0..3 {
        let zero = call(&mut c, vec![descriptor(&tokens, Some(0))]).await;
        assert_eq!(zero, (OK, vec![100]), "a check of 0 takes nothing");
    }
    assert_eq!(
        call(&mut c, vec![descriptor(&tokens, Some(30))]).await,
        (OK, vec![70])
    );
}

/// The charge after a response that overshoots the budget (120 tokens
/// into 100) is refused, and what happens to it decides the next check:
/// a fixed window counts it all the same, and a token bucket with
/// `overdraft: true` takes it into debt, so the user's next request is
/// refused; a plain token bucket refuses the charge and takes nothing, so
/// the user goes on as if the 120 tokens were never spent.
#[tokio::test]
async fn a_refused_charge_after_the_response_is_kept_by_a_window_and_an_overdraft_bucket() {
    let s = Sluice::start(&[("ag.yaml", RULES)], &[]);
    let mut c = s.client().await;
    for (shape, kept) in [("fixed", true), ("overdraft", true), ("bucket", false)] {
        let tokens = [("tokens", shape), ("user", "u2")];
        // The check before the request: its estimate, 0 here.
        assert_eq!(
            call(&mut c, vec![descriptor(&tokens, Some(0))]).await.0,
            OK,
            "{shape}"
        );
        // The charge after the response; agentgateway ignores the answer.
        let charged = call(&mut c, vec![descriptor(&tokens, Some(120))]).await.0;
        assert_eq!(charged, OVER, "{shape}: 120 of 100 does not fit");
        let next = call(&mut c, vec![descriptor(&tokens, Some(0))]).await.0;
        assert_eq!(next == OVER, kept, "{shape}: the next check");
    }
}
