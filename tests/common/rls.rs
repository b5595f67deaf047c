//! Asking sluice over gRPC as Envoy does: descriptors, requests, answers, sheds and frames.

use super::*;

/// A gRPC client of sluice's rate-limit service, as a test holds one.
pub type Client = RateLimitServiceClient<Channel>;

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A descriptor carrying Envoy's per-request `limit` override.
pub fn descriptor_with_limit(
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        ..descriptor(entries)
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// One descriptor's decision. A request sluice shed because it judged
/// itself late (UNAVAILABLE, never counted) is asked again ([`past_sheds`]):
/// it is not the answer a test looks at, and a test that wants sheds calls
/// directly.
pub async fn ask(
    c: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    entries: &[(&str, &str)],
) -> RateLimitResponse {
    past_sheds(c, || {
        tonic::Request::new(request(domain, vec![descriptor(entries)]))
    })
    .await
    .unwrap_or_else(|s| panic!("rpc: {s:?}"))
}

/// The answer to the call `make` builds, asked again for up to 2 s while
/// sluice sheds it for its own lateness; any other error as it came. Sheds
/// come from a loaded test machine starving sluice past a short store
/// timeout (a store silent for 1 s is found out whatever the lateness:
/// `tests/starved.rs`).
pub async fn past_sheds(
    c: &mut RateLimitServiceClient<Channel>,
    make: impl Fn() -> tonic::Request<RateLimitRequest>,
) -> Result<RateLimitResponse, tonic::Status> {
    let since = Instant::now();
    loop {
        match c.should_rate_limit(make()).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) if is_shed(&s) && since.elapsed() < Duration::from_secs(2) => {}
            Err(s) => return Err(s),
        }
    }
}

/// Whether sluice shed this call for its own lateness or its own queue
/// (`--max-pending`): UNAVAILABLE, "request shed".
pub fn is_shed(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unavailable && s.message().contains("request shed")
}

pub fn retry_after(r: &RateLimitResponse) -> Option<u64> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == "Retry-After")
        .map(|h| h.value.parse().expect("number"))
}

/// `req` as one gRPC frame (no compression), the body h2load sends.
pub fn grpc_frame(req: &RateLimitRequest) -> Vec<u8> {
    use prost::Message as _;
    let mut body = vec![0u8];
    body.extend_from_slice(
        &u32::try_from(req.encoded_len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    req.encode(&mut body).expect("encode");
    body
}

/// Sends `n` concurrent requests for one descriptor, spread round-robin over
/// `clients`, and returns how many were admitted.
pub async fn admitted(
    clients: &[RateLimitServiceClient<Channel>],
    n: usize,
    domain: &'static str,
    entry: (&'static str, &'static str),
) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let mut c = clients[i % clients.len()].clone();
            tokio::spawn(async move { ask(&mut c, domain, &[entry]).await.overall_code })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.expect("task") == OK);
    }
    ok
}
