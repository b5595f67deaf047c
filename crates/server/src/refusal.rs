//! Why sluice refuses a call, and the one place a refusal becomes a gRPC
//! status or an HTTP one (the admin doors: `/json`, the counters). The
//! codes are chosen for what Envoy does with them: a store failure is
//! UNAVAILABLE (HTTP 503) so that its `failure_mode_deny` decides (never a
//! 429); a bound reached is RESOURCE_EXHAUSTED (429); a body too slow is
//! DEADLINE_EXCEEDED (408); a malformed request or report is
//! INVALID_ARGUMENT (400); a counters call without a good token is
//! UNAUTHENTICATED (401, with `WWW-Authenticate: Bearer`); an admin call a
//! web page could have sent (a foreign `Host`, a cross-site POST) is
//! PERMISSION_DENIED (403).

use tonic::Status;

/// A refused call, in words that name what and which flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The request or report is malformed.
    Invalid(String),
    /// No decision: the store failed with no policy to decide, or the
    /// request was shed.
    Unavailable(String),
    /// A bound was reached (streams, bytes in flight).
    Exhausted(String),
    /// The caller did not send its body in time.
    TooSlow(String),
    /// A call that needs a token came without a good one.
    Unauthenticated(String),
    /// A call no caller of this kind may make.
    Denied(String),
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Status {
        match r {
            Refusal::Invalid(why) => Status::invalid_argument(why),
            Refusal::Unavailable(why) => Status::unavailable(why),
            Refusal::Exhausted(why) => Status::resource_exhausted(why),
            Refusal::TooSlow(why) => Status::deadline_exceeded(why),
            Refusal::Unauthenticated(why) => Status::unauthenticated(why),
            Refusal::Denied(why) => Status::permission_denied(why),
        }
    }
}

impl Refusal {
    /// The HTTP status of the same refusal.
    pub(crate) fn http_status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Refusal::Invalid(_) => StatusCode::BAD_REQUEST,
            Refusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Exhausted(_) => StatusCode::TOO_MANY_REQUESTS,
            Refusal::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            Refusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Refusal::Denied(_) => StatusCode::FORBIDDEN,
        }
    }

    /// The refusal as an HTTP answer: its status, and its words as the
    /// body.
    pub(crate) fn into_http(self) -> axum::response::Response {
        use axum::response::IntoResponse;
        let code = self.http_status();
        let bearer = matches!(self, Refusal::Unauthenticated(_));
        let (Refusal::Invalid(why)
        | Refusal::Unavailable(why)
        | Refusal::Exhausted(why)
        | Refusal::TooSlow(why)
        | Refusal::Unauthenticated(why)
        | Refusal::Denied(why)) = self;
        let mut answer = (code, format!("{why}\n")).into_response();
        if bearer {
            let challenge = axum::http::HeaderValue::from_static("Bearer");
            answer
                .headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, challenge);
        }
        answer
    }
}

/// A request tonic refused before any handler ran, answered as what it is:
/// a malformed request, INVALID_ARGUMENT. tonic says OUT_OF_RANGE for a
/// message over the size limit and INTERNAL "failed to decode" for one that
/// does not decode; a trailers-only answer carries the status in the
/// headers. `true` when `headers` were such an answer, now rewritten.
pub(crate) fn tonic_refusal_as_invalid(headers: &mut tonic::codegen::http::HeaderMap) -> bool {
    use tonic::codegen::http::HeaderName;
    // Names made once: looking up by `&str` parses it on every answer.
    static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
    static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
    let Some(status) = headers.get(&GRPC_STATUS) else {
        return false;
    };
    let refused = match tonic::Code::from_bytes(status.as_bytes()) {
        tonic::Code::OutOfRange => true,
        tonic::Code::Internal => headers
            .get(&GRPC_MESSAGE)
            .is_some_and(|m| m.as_bytes().starts_with(b"failed%20to%20decode")),
        _ => false,
    };
    if refused {
        let invalid = tonic::Code::InvalidArgument as i32;
        headers.insert(GRPC_STATUS.clone(), invalid.into());
    }
    refused
}

#[cfg(test)]
#[path = "refusal_tests.rs"]
mod tests;
