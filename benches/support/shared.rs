//! What `make bench` and `make instructions` both send: the rules, and a
//! request framed for gRPC as h2load replays it.

#![allow(dead_code)]

use std::fmt::Display;
use std::path::Path;
use std::process::Command;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;

use super::common;

pub const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

pub const RULES: &str = "
domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: tier
    value: credentials
    descriptors:
      - key: ip
        descriptors:
          - key: path
            rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: flood
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: refund_flood
    rate_limit: {unit: day, requests_per_unit: 10, refundable: true}
  - key: slide
    rate_limit: {unit: day, requests_per_unit: 1000000000, algorithm: sliding_window}
  - key: tb
    rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: token_bucket}
  - key: tbmem
    rate_limit: {unit: day, requests_per_unit: 1, algorithm: token_bucket, burst: 1000}
";

/// The request h2load sends, framed for gRPC.
pub fn grpc_body(descriptors: &[&[(&str, &str)]]) -> Vec<u8> {
    let msg = RateLimitRequest {
        domain: "bench".into(),
        descriptors: descriptors.iter().map(|e| common::descriptor(e)).collect(),
        hits_addend: 0,
    }
    .encode_to_vec();
    frame(msg)
}

/// One gRPC message framed as on the wire (uncompressed).
pub fn frame(msg: Vec<u8>) -> Vec<u8> {
    let mut framed = vec![0];
    framed.extend((msg.len() as u32).to_be_bytes());
    framed.extend(msg);
    framed
}

/// h2load replaying `body` as ShouldRateLimit calls to `to` (host:port),
/// with `shape` (threads, connections, streams, duration or count) first.
pub fn h2load(shape: &[&str], body: &Path, to: impl Display) -> Command {
    let mut cmd = Command::new("h2load");
    cmd.args(shape)
        .args(["-H", "content-type:application/grpc", "-H", "te:trailers"])
        .arg("-d")
        .arg(body)
        .arg(format!("http://{to}{PATH}"));
    cmd
}

/// `n` customers of their own limit, and a key-only default for every
/// other customer: each request then counts one counter whatever the rule
/// count, so the sizes differ only in the matcher's work.
pub fn customers(n: usize, bump: u32) -> String {
    let mut s = String::with_capacity(n * 90 + 128);
    s.push_str("domain: saas\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n");
    for i in 0..n {
        let limit = 1_000_000 + (i as u32 % 50) + bump;
        s.push_str(&format!(
            "  - key: api_key\n    value: cust{i}\n    rate_limit:\n      unit: minute\n      requests_per_unit: {limit}\n"
        ));
    }
    s
}
