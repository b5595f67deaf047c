use super::*;

fn peer(ip: &str) -> Option<SocketAddr> {
    Some(SocketAddr::new(ip.parse().unwrap(), 4000))
}

#[test]
fn a_token_file_over_the_bound_is_refused_and_a_rewrite_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "one\n").unwrap();
    let (stamp, token) = read_if_changed(&path, None).unwrap().unwrap();
    assert_eq!(token.as_deref(), Some("one"));
    assert!(
        read_if_changed(&path, Some(stamp)).unwrap().is_none(),
        "unchanged"
    );
    std::fs::write(&path, "x".repeat(MAX_TOKEN_BYTES as usize + 1)).unwrap();
    let e = read_if_changed(&path, Some(stamp)).unwrap_err();
    assert!(e.contains("is over 4096 bytes"), "{e}");
    std::fs::write(&path, "x".repeat(MAX_TOKEN_BYTES as usize)).unwrap();
    assert!(
        read_if_changed(&path, Some(stamp)).unwrap().is_some(),
        "at the bound"
    );
}

#[tokio::test]
async fn without_a_token_loopback_only() {
    let t = AdminToken::new(None);
    assert_eq!(
        t.authorise(None, peer("127.0.0.1")).await,
        Ok(Caller::Loopback)
    );
    assert_eq!(t.authorise(None, peer("::1")).await, Ok(Caller::Loopback));
    let e = t.authorise(Some("x"), peer("10.0.0.1")).await.unwrap_err();
    assert!(e.contains("loopback peers only"), "{e}");
    assert!(
        t.authorise(None, None).await.is_err(),
        "no peer known: refused"
    );
}

#[tokio::test]
async fn the_token_is_required_read_again_when_rotated_and_never_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "first-secret\n").unwrap();
    let t = AdminToken::new(Some(path.clone()));
    let local = peer("127.0.0.1");
    assert!(
        t.authorise(None, local)
            .await
            .unwrap_err()
            .contains("missing")
    );
    assert_eq!(
        t.authorise(Some("nope"), local).await,
        Err("wrong token".into())
    );
    let ok = t.authorise(Some("first-secret"), local).await.unwrap();
    assert_eq!(ok, Caller::Token(token_id("first-secret")));
    assert_eq!(ok.id().len(), 8);
    std::fs::write(&path, "second-secret-longer\n").unwrap();
    assert_eq!(
        t.authorise(Some("first-secret"), local).await,
        Err("wrong token".into())
    );
    assert!(
        t.authorise(Some("second-secret-longer"), local)
            .await
            .is_ok()
    );
    std::fs::write(&path, "\n").unwrap();
    assert!(
        t.authorise(Some(""), local)
            .await
            .unwrap_err()
            .contains("empty")
    );
}
