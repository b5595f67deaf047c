use super::*;

#[test]
fn descriptors_become_the_lookup_body() {
    let b = body(
        "api",
        &["tier=credentials, path=/login".into(), "ip=1.2.3.4".into()],
    )
    .unwrap();
    assert_eq!(at(&b, "/descriptors/0/entries/1/value"), "/login");
    assert_eq!(at(&b, "/descriptors/1/entries/0/key"), "ip");
    assert!(
        body("api", &["novalue".into()])
            .unwrap_err()
            .contains("key=value")
    );
    assert!(authority("https://x").is_err());
    assert_eq!(
        authority("http://127.0.0.1:8080/").unwrap(),
        "127.0.0.1:8080"
    );
}

#[test]
fn a_chunked_body_is_joined() {
    assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    assert_eq!(dechunk("ff\r\nshort"), "", "a chunk past the end stops");
}
