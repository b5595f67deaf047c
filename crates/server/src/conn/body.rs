//! Request bodies under bounds. A `ShouldRateLimit` body must arrive whole
//! within `--body-timeout`, and the bytes received but not yet decoded are
//! bounded per connection (`--max-connection-body-bytes`) and per process
//! (`--max-body-bytes`; past it only connections above their even share are
//! refused, so a hoarder cannot starve a small honest request). A quota
//! stream's body is a stream of reports instead: its first must come within
//! one bound and each next within another, or the stream is ended.
//!
//! A body still arriving is in flight but is not activity: a connection
//! whose only requests are half-sent is idle, and its idle timeout closes it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tonic::Status;
use tonic::codegen::Body;

use super::activity::Activity;
use crate::metrics::{Bound, Listener, Metrics};
use crate::refusal::Refusal;

/// The process's body bytes in flight and the bounds on them.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    total: AtomicUsize,
    pub(crate) per_connection: usize,
    pub(crate) per_process: usize,
    pub(crate) timeout: Duration,
    metrics: Arc<Metrics>,
}

impl BodyBudget {
    pub(crate) fn new(
        per_connection: usize,
        per_process: usize,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Arc<BodyBudget> {
        Arc::new(BodyBudget {
            total: AtomicUsize::new(0),
            per_connection,
            per_process,
            timeout,
            metrics,
        })
    }

    /// Takes `n` bytes for a body on `conn`, or says why not.
    fn take(&self, conn: &Activity, n: usize) -> Result<(), &'static str> {
        let mine = conn.body_bytes.load(Relaxed) + n;
        if mine > self.per_connection {
            return Err(
                "request bytes in flight on this connection over --max-connection-body-bytes",
            );
        }
        let total = self.total.load(Relaxed) + n;
        if total > self.per_process {
            let open = self.metrics.open_connections(Listener::Grpc).max(1);
            let share = self.per_process / usize::try_from(open).unwrap_or(usize::MAX);
            if mine > share {
                return Err("request bytes in flight over --max-body-bytes");
            }
        }
        conn.body_bytes.fetch_add(n, Relaxed);
        self.total.fetch_add(n, Relaxed);
        Ok(())
    }

    fn give_back(&self, conn: &Activity, n: usize) {
        conn.body_bytes.fetch_sub(n, Relaxed);
        self.total.fetch_sub(n, Relaxed);
    }
}

/// How a body is watched.
#[derive(Debug, Clone)]
pub(crate) enum BodyWatch {
    /// One message, whole within the budget's timeout and bytes.
    Unary(Arc<BodyBudget>),
    /// A stream of messages: the first within `first`, each next within
    /// `idle` of the one before.
    Stream {
        first: Duration,
        idle: Duration,
        metrics: Arc<Metrics>,
    },
}

/// A request body under its [`BodyWatch`].
pub struct Metered<B> {
    inner: B,
    watch: BodyWatch,
    conn: Arc<Activity>,
    /// Bytes taken from the budget (unary).
    held: usize,
    /// Armed only once the body is not there when asked: a body that
    /// arrives whole (every Envoy request) costs no timer.
    timer: Option<Pin<Box<Sleep>>>,
    /// How long the body may then take.
    wait: Duration,
    done: bool,
}

impl<B> Metered<B> {
    pub(crate) fn new(inner: B, watch: BodyWatch, conn: Arc<Activity>) -> Metered<B> {
        let (wait, timer) = match &watch {
            BodyWatch::Unary(b) => {
                conn.body_started();
                (b.timeout, None)
            }
            // A stream's first report is due from the stream's start.
            BodyWatch::Stream { first, .. } => (*first, Some(Box::pin(tokio::time::sleep(*first)))),
        };
        Metered {
            inner,
            watch,
            conn,
            held: 0,
            timer,
            wait,
            done: false,
        }
    }

    /// The body has ended (or failed): its bytes and its "reading" mark go.
    fn finish(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        if let BodyWatch::Unary(b) = &self.watch {
            b.give_back(&self.conn, self.held);
            self.held = 0;
            self.conn.body_done();
        }
    }

    fn fail(&mut self, bound: Bound, status: Status) -> BoxError {
        let metrics = match &self.watch {
            BodyWatch::Unary(b) => &b.metrics,
            BodyWatch::Stream { metrics, .. } => metrics,
        };
        if metrics.bound_hit(bound, 1) {
            tracing::warn!(
                bound = bound.name(),
                reason = status.message(),
                "request ended by a bound (logged once per 10 s; sluice_bound_hits_total counts each)"
            );
        }
        self.finish();
        Box::new(status)
    }

    /// A data frame of `n` bytes arrived.
    fn arrived(&mut self, n: usize) -> Result<(), Status> {
        match &self.watch {
            BodyWatch::Unary(b) => {
                b.take(&self.conn, n)
                    .map_err(|why| Status::from(Refusal::Exhausted(why.into())))?;
                self.held += n;
            }
            BodyWatch::Stream { idle, .. } => {
                let at = Instant::now() + *idle;
                match &mut self.timer {
                    Some(t) => t.as_mut().reset(at),
                    None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
                }
            }
        }
        Ok(())
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = tonic::codegen::Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = tonic::codegen::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(status) = this.arrived(data.len())
                {
                    return Poll::Ready(Some(Err(this.fail(Bound::BodyBytes, status))));
                }
                if this.inner.is_end_stream() {
                    this.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish();
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Pending => {
                let wait = this.wait;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                let (bound, why) = match this.watch {
                    BodyWatch::Unary(_) => (
                        Bound::BodyTimeout,
                        "request body not complete within --body-timeout",
                    ),
                    BodyWatch::Stream { .. } => (
                        Bound::QuotaSilent,
                        "quota stream sent nothing within --quota-stream-idle",
                    ),
                };
                Poll::Ready(Some(Err(
                    this.fail(bound, Refusal::TooSlow(why.into()).into())
                )))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
