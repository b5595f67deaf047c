//! The listeners' families: connections open, closed idle, failed accepts.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::service::gauge_value;
use super::{Listener, encode};

#[derive(Debug, Default)]
pub(super) struct ConnMetrics {
    grpc_open: AtomicU64,
    admin_open: AtomicU64,
    pub(super) idle_closed: AtomicU64,
    pub(super) accept_errors: AtomicU64,
}

impl ConnMetrics {
    pub(super) fn open(&self, listener: Listener) -> &AtomicU64 {
        match listener {
            Listener::Grpc => &self.grpc_open,
            Listener::Admin => &self.admin_open,
        }
    }
}

impl Collector for ConnMetrics {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> encode::Result {
        encode::gauge(
            &mut enc,
            "sluice_grpc_connections",
            "Open gRPC connections.",
            gauge_value(self.grpc_open.load(Relaxed)),
        )?;
        encode::gauge(
            &mut enc,
            "sluice_admin_connections",
            "Open admin connections.",
            gauge_value(self.admin_open.load(Relaxed)),
        )?;
        encode::counter(
            &mut enc,
            "sluice_connections_idle_closed",
            "Connections closed after the idle timeout.",
            self.idle_closed.load(Relaxed),
        )?;
        encode::counter(
            &mut enc,
            "sluice_accept_errors",
            "Failed accepts (such as running out of file descriptors), each followed by a pause.",
            self.accept_errors.load(Relaxed),
        )
    }
}
