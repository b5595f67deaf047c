//! What a request may cost sluice before it reaches the store: a bound on
//! decisions waiting for the store at once (`--max-pending`; past it the
//! request is shed at once, with a share kept for every connection so a
//! flood on some cannot shed the others), and its caller's deadline
//! (`grpc-timeout`), past which nobody waits for the answer.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use tokio::time::Instant;
use tonic::codegen::http::HeaderName;
use tonic::metadata::MetadataMap;

use crate::conn::Activity;

/// Decisions waiting for the store.
#[derive(Debug)]
pub(crate) struct Pending {
    n: AtomicUsize,
    max: usize,
}

/// One decision's place; given back when dropped.
pub(crate) struct Slot<'a> {
    pending: &'a Pending,
    conn: Option<&'a Activity>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.pending.n.fetch_sub(1, Relaxed);
        if let Some(c) = self.conn {
            c.pending.fetch_sub(1, Relaxed);
        }
    }
}

impl Pending {
    pub(crate) fn new(max: usize) -> Pending {
        Pending {
            n: AtomicUsize::new(0),
            max: max.max(1),
        }
    }

    /// A place for a decision from `conn`, or `None` when the bound is
    /// reached and `conn` holds its even share of the `open()` connections
    /// (only counted then).
    pub(crate) fn enter<'a>(
        &'a self,
        conn: Option<&'a Activity>,
        open: impl FnOnce() -> u64,
    ) -> Option<Slot<'a>> {
        let before = self.n.fetch_add(1, Relaxed);
        let mine = conn.map_or(0, |c| c.pending.fetch_add(1, Relaxed));
        let slot = Slot {
            pending: self,
            conn,
        };
        if before < self.max {
            return Some(slot);
        }
        let share = self.max / usize::try_from(open().max(1)).unwrap_or(usize::MAX);
        (conn.is_some() && mine < share.max(1)).then_some(slot)
    }
}

/// `sluice_pending_decisions`: how many decisions wait for the store now,
/// read at a scrape (the request path only moves the count it keeps anyway).
#[derive(Debug)]
pub(crate) struct PendingGauge(pub(crate) std::sync::Arc<Pending>);

impl Collector for PendingGauge {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let n = i64::try_from(self.0.n.load(Relaxed)).unwrap_or(i64::MAX);
        crate::metrics::encode::gauge(
            &mut enc,
            "sluice_pending_decisions",
            "Decisions waiting for the store now (or its local cache); past --max-pending requests are shed.",
            n,
        )
    }
}

/// The caller's deadline, from its `grpc-timeout` (Envoy sends its filter
/// timeout there).
pub(crate) fn deadline(metadata: &MetadataMap) -> Option<Instant> {
    // A name made once: looking up by `&str` parses it on every request.
    static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
    let v = metadata.as_ref().get(&GRPC_TIMEOUT)?.to_str().ok()?;
    parse_timeout(v).map(|d| Instant::now() + d)
}

/// `grpc-timeout`'s format: up to eight digits and a unit (H, M, S, m, u, n).
fn parse_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
