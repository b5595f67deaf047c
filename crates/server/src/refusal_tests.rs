use super::*;

#[test]
fn each_refusal_has_its_code_and_keeps_its_words() {
    for (r, code) in [
        (Refusal::Invalid("bad".into()), tonic::Code::InvalidArgument),
        (
            Refusal::Unavailable("down".into()),
            tonic::Code::Unavailable,
        ),
        (
            Refusal::Exhausted("full".into()),
            tonic::Code::ResourceExhausted,
        ),
        (
            Refusal::TooSlow("late".into()),
            tonic::Code::DeadlineExceeded,
        ),
        (
            Refusal::Unauthenticated("no token".into()),
            tonic::Code::Unauthenticated,
        ),
        (
            Refusal::Denied("cross-site".into()),
            tonic::Code::PermissionDenied,
        ),
    ] {
        let words = match &r {
            Refusal::Invalid(w)
            | Refusal::Unavailable(w)
            | Refusal::Exhausted(w)
            | Refusal::TooSlow(w)
            | Refusal::Unauthenticated(w)
            | Refusal::Denied(w) => w.clone(),
        };
        let s = Status::from(r);
        assert_eq!((s.code(), s.message()), (code, words.as_str()));
    }
}

#[test]
fn what_tonic_refuses_before_a_handler_is_invalid_argument() {
    let answer = |status: &'static str, message: &'static str| {
        let mut h = tonic::codegen::http::HeaderMap::new();
        h.insert("grpc-status", status.parse().unwrap());
        h.insert("grpc-message", message.parse().unwrap());
        let rewritten = tonic_refusal_as_invalid(&mut h);
        (rewritten, h["grpc-status"].to_str().unwrap().to_owned())
    };
    assert_eq!(answer("11", "too%20big"), (true, "3".into()));
    assert_eq!(answer("13", "failed%20to%20decode"), (true, "3".into()));
    assert_eq!(answer("13", "other"), (false, "13".into()));
    assert_eq!(answer("14", "down"), (false, "14".into()));
    let mut none = tonic::codegen::http::HeaderMap::new();
    assert!(!tonic_refusal_as_invalid(&mut none));
}

#[tokio::test]
async fn an_http_refusal_has_the_same_meaning_and_words() {
    use axum::http::StatusCode;
    for (r, code) in [
        (Refusal::Invalid("bad".into()), StatusCode::BAD_REQUEST),
        (
            Refusal::Unavailable("down".into()),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            Refusal::Exhausted("full".into()),
            StatusCode::TOO_MANY_REQUESTS,
        ),
        (Refusal::TooSlow("late".into()), StatusCode::REQUEST_TIMEOUT),
    ] {
        let answer = r.into_http();
        assert_eq!(answer.status(), code);
        let body = axum::body::to_bytes(answer.into_body(), 1024)
            .await
            .unwrap();
        assert!(body.ends_with(b"\n") && body.len() > 2, "{body:?}");
    }
}

/// An admin refusal is answered over HTTP with its status and its words;
/// a missing token also says which scheme to use.
#[test]
fn an_admin_refusal_answers_its_http_status_and_words() {
    let answer = Refusal::Unauthenticated("no token".into()).into_http();
    assert_eq!(answer.status(), axum::http::StatusCode::UNAUTHORIZED);
    assert_eq!(answer.headers()["www-authenticate"], "Bearer");
    let answer = Refusal::Denied("cross-site".into()).into_http();
    assert_eq!(answer.status(), axum::http::StatusCode::FORBIDDEN);
    assert!(!answer.headers().contains_key("www-authenticate"));
}
