use super::*;

fn shown(name: &str, limit: u32, w: u64, r: u32, t: u64) -> Shown {
    Shown {
        name: name.into(),
        limit,
        window_seconds: w,
        remaining: r,
        reset_seconds: t,
    }
}

fn text(h: &[HeaderValue]) -> Vec<String> {
    h.iter()
        .map(|h| format!("{}: {}", h.key, h.value))
        .collect()
}

#[test]
fn draft03_matches_envoys_format_with_real_windows() {
    let limits = [shown("per-ip", 10, 60, 3, 42), shown("", 1000, 90, 500, 80)];
    assert_eq!(
        text(&build(ResponseHeaders::Draft03, &limits)),
        [
            "X-RateLimit-Limit: 10, 10;w=60;name=\"per-ip\", 1000;w=90",
            "X-RateLimit-Remaining: 3",
            "X-RateLimit-Reset: 42"
        ]
    );
}

#[test]
fn ietf_lists_every_policy_and_its_state() {
    let limits = [
        shown("burst", 10, 1, 9, 1),
        shown("da\"ily", 10000, 86400, 42, 3600),
    ];
    assert_eq!(
        text(&build(ResponseHeaders::Ietf, &limits)),
        [
            "RateLimit-Policy: \"burst\";q=10;w=1, \"da\\\"ily\";q=10000;w=86400",
            "RateLimit: \"burst\";r=9;t=1, \"da\\\"ily\";r=42;t=3600"
        ]
    );
    assert!(build(ResponseHeaders::None, &limits).is_empty());
    assert!(build(ResponseHeaders::Ietf, &[]).is_empty());
}
