//! Why sluice refuses a call, and the one place a refusal becomes a gRPC
//! status. The codes are chosen for what Envoy does with them: a store
//! failure is UNAVAILABLE so that its `failure_mode_deny` decides (never a
//! 429); a bound reached is RESOURCE_EXHAUSTED; a body too slow is
//! DEADLINE_EXCEEDED; a malformed request or report is INVALID_ARGUMENT.

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
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Status {
        match r {
            Refusal::Invalid(why) => Status::invalid_argument(why),
            Refusal::Unavailable(why) => Status::unavailable(why),
            Refusal::Exhausted(why) => Status::resource_exhausted(why),
            Refusal::TooSlow(why) => Status::deadline_exceeded(why),
        }
    }
}

#[cfg(test)]
mod tests {
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
        ] {
            let words = match &r {
                Refusal::Invalid(w)
                | Refusal::Unavailable(w)
                | Refusal::Exhausted(w)
                | Refusal::TooSlow(w) => w.clone(),
            };
            let s = Status::from(r);
            assert_eq!((s.code(), s.message()), (code, words.as_str()));
        }
    }
}
