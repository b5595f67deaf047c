use super::*;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, v.parse().expect("header value"));
    }
    h
}

#[test]
fn foreign_hosts_and_cross_site_posts_are_refused() {
    let a = AdminAccess {
        allowed_hosts: vec!["sluice.internal".into()],
        token_file: None,
    };
    let ok =
        |m: Method, h: &[(&'static str, &'static str)]| check_access(&a, &m, &headers(h)).is_ok();
    assert!(ok(Method::GET, &[("host", "127.0.0.1:8080")]));
    assert!(ok(Method::GET, &[("host", "[::1]:8080")]));
    assert!(ok(Method::GET, &[("host", "localhost:8080")]));
    assert!(ok(Method::GET, &[("host", "sluice.internal:8080")]));
    assert!(!ok(Method::GET, &[("host", "evil.example:8080")]));
    assert!(!ok(Method::GET, &[("host", "127.0.0.1.evil.example")]));
    assert!(ok(
        Method::POST,
        &[
            ("host", "127.0.0.1:8080"),
            ("content-type", "application/json")
        ]
    ));
    assert!(ok(Method::POST, &[("host", "127.0.0.1:8080")]));
    assert!(!ok(
        Method::POST,
        &[
            ("host", "127.0.0.1:8080"),
            ("content-type", "text/plain;charset=UTF-8")
        ]
    ));
    assert!(!ok(
        Method::POST,
        &[
            ("host", "127.0.0.1:8080"),
            ("content-type", "application/x-www-form-urlencoded")
        ]
    ));
    assert!(!ok(
        Method::POST,
        &[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example")
        ]
    ));
    assert!(ok(
        Method::POST,
        &[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ]
    ));
}
