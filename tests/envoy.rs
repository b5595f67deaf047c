//! End to end: a real Envoy with the shipped `envoy/envoy.yaml`, sluice with
//! the shipped `descriptors/` counting in a real Redis, and the demo upstream.
//! Each test drives the stack over HTTP as a client would, and checks one
//! defect of the seed recipe cannot happen.

mod common;
#[path = "envoy/lifecycle.rs"]
mod lifecycle;
#[path = "envoy/rolling.rs"]
mod rolling;

use std::time::Duration;

use common::stack::{ENVOY_FILTER_TIMEOUT_MS, Reply, Stack, envoy_bin, repo_file, room_in_window};
use common::{eventually, workspace};

const ORIGIN: &str = "https://app.example.com";

fn assert_rate_limit_headers(r: &Reply) {
    for h in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert!(
            r.header(h).is_some(),
            "{h} missing on {} {:?}",
            r.status,
            r.headers
        );
    }
}

/// A 429 as a client sees it: Retry-After in the window, the problem+json
/// body, and the request id in header and body.
fn assert_problem(r: &Reply, instance: &str) {
    assert_problem_within(r, instance, 60);
}

fn assert_problem_within(r: &Reply, instance: &str, window: u64) {
    assert_eq!(r.status, 429, "{r:?}");
    let wait: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {r:?}"));
    assert!((1..=window).contains(&wait), "Retry-After {wait}");
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("problem+json body");
    assert_eq!(body["status"], 429);
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["instance"], instance);
    assert_eq!(body["retry_after"], wait.to_string());
    let id = r.header("x-request-id").expect("x-request-id");
    assert_eq!(body["request_id"], id);
}

#[test]
fn login_has_its_own_bucket_per_ip_and_path() {
    let stack = Stack::start();
    room_in_window(60, 20);
    let ip = "203.0.113.10";
    // Query strings, doubled and trailing slashes and forged X-Forwarded-For
    // entries all spend the same /api/auth/login budget of this client IP.
    let paths = [
        "/api/auth/login",
        "/api/auth/login?next=/x",
        "//api/auth/login",
        "/api/auth/login/",
    ];
    for i in 0..30 {
        let forged = format!("10.9.8.{i}, {ip}");
        let xff = if i % 2 == 0 { ip } else { forged.as_str() };
        let r = stack.send(
            "POST",
            paths[i % paths.len()],
            &[
                ("content-type", "application/json"),
                ("x-forwarded-for", xff),
            ],
            "{}",
        );
        assert_eq!(r.status, 200, "login {} of 30: {r:?}", i + 1);
        assert_rate_limit_headers(&r);
        assert_eq!(
            r.header("x-ratelimit-remaining"),
            Some((29 - i).to_string().as_str())
        );
    }
    let r = stack.send(
        "POST",
        "/api/auth/login?attempt=31",
        &[
            ("content-type", "application/json"),
            ("x-forwarded-for", &format!("198.51.100.1, {ip}")),
            ("origin", ORIGIN),
        ],
        "{}",
    );
    assert_problem(&r, "/api/auth/login");
    assert_eq!(r.header("access-control-allow-origin"), Some(ORIGIN));

    // Another credential route is another bucket; another client IP too.
    assert_eq!(stack.post_json("/api/auth/register", ip, "{}").status, 200);
    assert_eq!(
        stack
            .post_json("/api/auth/login", "203.0.113.11", "{}")
            .status,
        200
    );

    a_preflight_never_reaches_sluice(&stack, ip);
}

/// A CORS preflight is answered by Envoy and never reaches sluice.
fn a_preflight_never_reaches_sluice(stack: &Stack, ip: &str) {
    // A CORS preflight is answered by Envoy and never reaches sluice.
    let asked = stack.envoy_stat("cluster.upstream.ratelimit.ok")
        + stack.envoy_stat("cluster.upstream.ratelimit.over_limit");
    let r = stack.send(
        "OPTIONS",
        "/api/auth/login",
        &[
            ("origin", ORIGIN),
            ("access-control-request-method", "POST"),
            ("x-forwarded-for", ip),
        ],
        "",
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("access-control-allow-origin"), Some(ORIGIN));
    assert_eq!(
        stack.envoy_stat("cluster.upstream.ratelimit.ok")
            + stack.envoy_stat("cluster.upstream.ratelimit.over_limit"),
        asked
    );
}

/// An IPv6 client owns a whole /64: rotating addresses inside it spends one
/// budget, while another /64 (another client) has its own.
#[test]
fn ipv6_clients_are_limited_per_64() {
    let stack = Stack::start();
    room_in_window(60, 20);
    for i in 0..30 {
        let ip = format!("2001:db8:aa:1:{i:x}::{:x}", i * 7 + 1);
        let r = stack.post_json("/api/auth/login", &ip, "{}");
        assert_eq!(r.status, 200, "login {} of 30 from {ip}: {r:?}", i + 1);
    }
    let r = stack.post_json("/api/auth/login", "2001:db8:aa:1:ffff:ffff:ffff:ffff", "{}");
    assert_problem(&r, "/api/auth/login");
    // The neighbouring /64 and an IPv4 client are other budgets.
    let r = stack.post_json("/api/auth/login", "2001:db8:aa:2::1", "{}");
    assert_eq!(r.status, 200, "{r:?}");
    let r = stack.post_json("/api/auth/login", "203.0.113.99", "{}");
    assert_eq!(r.status, 200, "{r:?}");
}

/// sluice can write the rate-limit headers itself (`--response-headers`),
/// here with Envoy's own `enable_x_ratelimit_headers` switched off.
#[test]
fn sluice_sends_ietf_and_draft03_headers_through_envoy() {
    let own_headers_off = |c: &str| c.replace("enable_x_ratelimit_headers: DRAFT_VERSION_03", "");
    let stack = Stack::start_with(&["--response-headers", "ietf"], own_headers_off);
    room_in_window(60, 10);
    let r = stack.post_json("/api/auth/login", "203.0.113.70", "{}");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("ratelimit-policy"),
        Some("\"credentials_per_ip_path\";q=30;w=60"),
        "{r:?}"
    );
    let state = r.header("ratelimit").unwrap_or_default();
    assert!(
        state.starts_with("\"credentials_per_ip_path\";r=29;t="),
        "{state}"
    );
    assert_eq!(r.header("x-ratelimit-limit"), None, "Envoy's own are off");
    drop(stack);

    let stack = Stack::start_with(&["--response-headers", "draft03"], own_headers_off);
    room_in_window(60, 10);
    let r = stack.post_json("/api/auth/login", "203.0.113.71", "{}");
    assert_eq!(
        r.header("x-ratelimit-limit"),
        Some("30, 30;w=60;name=\"credentials_per_ip_path\""),
        "{r:?}"
    );
    assert_eq!(r.header("x-ratelimit-remaining"), Some("29"));
}

#[test]
fn a_mailbox_has_one_budget_across_ips_and_spellings() {
    let stack = Stack::start();
    room_in_window(60, 20);
    let spellings = [
        "flood@example.com",
        "Flood@Example.com",
        " FLOOD+1@example.com ",
        "flood+news@EXAMPLE.COM",
    ];
    for i in 0..10 {
        let body = format!(r#"{{"email":"{}"}}"#, spellings[i % spellings.len()]);
        let r = stack.post_json(
            "/api/auth/request-magic-link",
            &format!("198.51.100.{}", i + 1),
            &body,
        );
        assert_eq!(r.status, 200, "mail {} of 10: {r:?}", i + 1);
    }
    let r = stack.post_json(
        "/api/auth/request-magic-link",
        "198.51.100.11",
        r#"{"email":"flood+11@example.com"}"#,
    );
    assert_problem(&r, "/api/auth/request-magic-link");
    // Another mailbox, and the same mailbox on another mail scope, still pass.
    let r = stack.post_json(
        "/api/auth/request-magic-link",
        "198.51.100.12",
        r#"{"email":"other@example.com"}"#,
    );
    assert_eq!(r.status, 200);
    let r = stack.post_json(
        "/api/auth/forgot-password",
        "198.51.100.13",
        r#"{"email":"flood@example.com"}"#,
    );
    assert_eq!(r.status, 200);

    // No usable email: the per-IP-per-route tier still applies.
    for i in 0..30 {
        let r = stack.post_json(
            "/api/auth/resend-verification",
            "198.51.100.50",
            r#"{"name":"no email"}"#,
        );
        assert_eq!(r.status, 200, "resend {} of 30", i + 1);
    }
    let r = stack.post_json("/api/auth/resend-verification", "198.51.100.50", "not json");
    assert_problem(&r, "/api/auth/resend-verification");

    no_address_in_clear(&stack);
}

/// No address in clear anywhere sluice writes: Redis keys, metrics, logs.
fn no_address_in_clear(stack: &Stack) {
    // No address in clear anywhere sluice writes.
    let keys = stack.redis.cli(&["--scan"]);
    assert!(!keys.is_empty(), "counters live in Redis");
    let (_, metrics) = stack.sluice().get("/metrics");
    let logs = stack.sluice().logs.lock().unwrap().join("\n");
    for text in [&keys, &metrics, &logs] {
        assert!(
            !text.to_lowercase().contains("example.com"),
            "address in clear: {text}"
        );
    }
}

#[test]
fn the_api_ceiling_spares_health_auth_and_logins() {
    let stack = Stack::start();
    room_in_window(60, 40);
    let ip = "192.0.2.77";
    let get = |path: &str, ip: &str| {
        stack.send(
            "GET",
            path,
            &[("x-forwarded-for", ip), ("origin", ORIGIN)],
            "",
        )
    };
    for i in 0..1000 {
        let r = get("/api/items?page=1", ip);
        assert_eq!(r.status, 200, "GET {} of 1000", i + 1);
    }
    let r = get("/api/items", ip);
    assert_problem(&r, "/api/items");
    assert_eq!(r.header("access-control-allow-origin"), Some(ORIGIN));
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap_or_default();
    for h in [
        "retry-after",
        "x-request-id",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert!(exposed.contains(h), "{h} not exposed: {exposed}");
    }
    // Over the /api ceiling, health checks and authenticated auth routes pass.
    for _ in 0..20 {
        let r = get("/api/health", ip);
        assert_eq!(r.status, 200);
        assert!(
            r.header("x-ratelimit-limit").is_none(),
            "/api/health is not limited"
        );
        assert_eq!(get("/api/auth/me", ip).status, 200);
    }
    a_public_flood_leaves_its_login_alone(&stack, get);
}

/// A public-prefix flood from one IP stops at 240, spends every public
/// prefix's one budget, and leaves its login alone.
fn a_public_flood_leaves_its_login_alone(stack: &Stack, get: impl Fn(&str, &str) -> Reply) {
    // A public-prefix flood from one IP stops at 240 and leaves its login alone.
    let ip = "192.0.2.88";
    for i in 0..240 {
        assert_eq!(
            get("/api/scribe/beacon", ip).status,
            200,
            "beacon {} of 240",
            i + 1
        );
    }
    assert_problem(&get("/api/scribe/beacon", ip), "/api/scribe/beacon");
    assert_eq!(
        get("/api/f/form-1", ip).status,
        429,
        "one public budget for every public prefix"
    );
    let r = stack.post_json("/api/auth/login", ip, "{}");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-ratelimit-remaining"), Some("29"));
}

#[test]
fn sign_up_is_limited_per_ip_and_per_email() {
    let stack = Stack::start();
    room_in_window(3600, 20);
    let ip = "203.0.113.60";
    for i in 0..5 {
        let path = if i % 2 == 0 {
            "/api/accounts"
        } else {
            "/api/accounts/verify"
        };
        let r = stack.post_json(path, ip, &format!(r#"{{"email":"new{i}@example.org"}}"#));
        assert_eq!(r.status, 200, "sign-up {} of 5: {r:?}", i + 1);
    }
    let r = stack.post_json("/api/accounts", ip, r#"{"email":"new5@example.org"}"#);
    assert_problem_within(&r, "/api/accounts", 3600);

    for i in 0..3 {
        let body = if i == 1 {
            r#"{"email":"Same+x@Example.org"}"#
        } else {
            r#"{"email":"same@example.org"}"#
        };
        let r = stack.post_json("/api/accounts", &format!("203.0.113.{}", 70 + i), body);
        assert_eq!(r.status, 200, "sign-up {} of 3 for one email", i + 1);
    }
    let r = stack.post_json(
        "/api/accounts",
        "203.0.113.80",
        r#"{"email":"same@example.org"}"#,
    );
    assert_eq!(r.status, 429, "{r:?}");
    // Reading a sign-up page is not a sign-up.
    assert_eq!(
        stack
            .send("GET", "/api/accounts", &[("x-forwarded-for", ip)], "")
            .status,
        200
    );
}
