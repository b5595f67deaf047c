//! `ShouldRateLimit` served straight to the limiter: tonic's own unary
//! handling (framing, limits, statuses, decode errors), without the
//! generated server's glue. The generated server boxes three futures a call
//! (its own, the method's, and the trait's `async_trait`) and encodes the
//! answer a byte at a time through tonic's buffer; this one boxes two and
//! writes the answer in one copy. Everything a client sees is the same:
//! the path, the statuses, the decode errors, the bytes of the answer.

use std::cell::RefCell;
use std::convert::Infallible;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::SERVICE_NAME;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, Context, Poll, StdError, http};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic_prost::ProstDecoder;

use crate::service::RateLimiter;

/// The one method's path.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The most bytes of scratch a worker thread keeps between answers: an
/// answer past it (dozens of descriptors with metadata) is written from a
/// buffer given back afterwards.
const SCRATCH_KEPT: usize = 16 * 1024;

thread_local! {
    /// Where an answer is encoded before its one copy into tonic's buffer.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The RLS service for tonic's router.
#[derive(Clone)]
pub(super) struct RlsServer {
    limiter: Arc<RateLimiter>,
    /// `--max-request-bytes`.
    max_decoding: usize,
}

impl RlsServer {
    pub(super) fn new(limiter: RateLimiter, max_decoding: usize) -> RlsServer {
        RlsServer {
            limiter: Arc::new(limiter),
            max_decoding,
        }
    }
}

impl NamedService for RlsServer {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> tonic::codegen::Service<http::Request<B>> for RlsServer
where
    B: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != PATH {
            return Box::pin(async { Ok(unimplemented()) });
        }
        let method = Decide(self.limiter.clone());
        let max = self.max_decoding;
        Box::pin(async move {
            let mut grpc = Grpc::new(RlsCodec).apply_max_message_size_config(Some(max), None);
            Ok(grpc.unary(method, req).await)
        })
    }
}

/// A method of this service it does not have: UNIMPLEMENTED, as tonic's
/// generated servers answer.
fn unimplemented() -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::default());
    let headers = response.headers_mut();
    headers.insert(
        Status::GRPC_STATUS,
        (tonic::Code::Unimplemented as i32).into(),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        tonic::metadata::GRPC_CONTENT_TYPE,
    );
    response
}

/// The method: the limiter's decision.
struct Decide(Arc<RateLimiter>);

impl UnaryService<RateLimitRequest> for Decide {
    type Response = RateLimitResponse;
    type Future = BoxFuture<tonic::Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: tonic::Request<RateLimitRequest>) -> Self::Future {
        let limiter = self.0.clone();
        Box::pin(async move { limiter.serve(request).await })
    }
}

/// Decodes as tonic's prost codec (its errors word for word); encodes
/// through [`SCRATCH`].
#[derive(Clone, Copy, Default)]
struct RlsCodec;

impl Codec for RlsCodec {
    type Encode = RateLimitResponse;
    type Decode = RateLimitRequest;
    type Encoder = RlsEncoder;
    type Decoder = ProstDecoder<RateLimitRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        RlsEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

/// Encodes an answer into the thread's scratch, then copies it into
/// tonic's buffer at once: tonic's buffer takes bytes through a generic
/// path that costs more per byte than the copy does for the whole answer.
#[derive(Debug, Clone, Copy, Default)]
struct RlsEncoder;

impl Encoder for RlsEncoder {
    type Item = RateLimitResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // The thread's scratch, or a buffer of its own should the scratch
        // be out of reach (a thread exiting): never a panic.
        let kept = SCRATCH.try_with(|cell| {
            cell.try_borrow_mut()
                .map(|mut scratch| write(&item, &mut scratch, dst))
                .ok()
        });
        if !matches!(kept, Ok(Some(()))) {
            write(&item, &mut Vec::new(), dst);
        }
        Ok(())
    }
}

/// `item` encoded into `scratch`, then copied into `dst` at once.
fn write(item: &RateLimitResponse, scratch: &mut Vec<u8>, dst: &mut EncodeBuf<'_>) {
    scratch.clear();
    // `encode_raw`: `encode` would first walk the whole answer for its
    // length, to check room a growing `Vec` always has.
    item.encode_raw(scratch);
    dst.reserve(scratch.len());
    prost::bytes::BufMut::put_slice(dst, scratch);
    if scratch.capacity() > SCRATCH_KEPT {
        *scratch = Vec::new();
    }
}
