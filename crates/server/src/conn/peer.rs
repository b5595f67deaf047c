//! Whom a connection is counted against, for every per-peer bound.

use std::net::IpAddr;

/// Whom a connection is counted against: an IPv4 address, an IPv6 /64 (one
/// host's usual allotment), or the Unix socket (every peer on this host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Peer {
    V4([u8; 4]),
    V6([u8; 8]),
    Local,
}

impl Peer {
    pub(crate) fn of(ip: IpAddr) -> Peer {
        match ip {
            IpAddr::V4(v4) => Peer::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer::V4(v4.octets()),
                None => {
                    let o = v6.octets();
                    let mut prefix = [0u8; 8];
                    prefix.copy_from_slice(o.get(..8).unwrap_or(&[0; 8]));
                    Peer::V6(prefix)
                }
            },
        }
    }

    /// The first half of the address (as the console masks them), for logs.
    pub(crate) fn masked(&self) -> String {
        match self {
            Peer::V4([a, b, ..]) => format!("{a}.{b}.x.x"),
            Peer::V6([a, b, c, d, ..]) => format!("{a:02x}{b:02x}:{c:02x}{d:02x}::/64"),
            Peer::Local => "unix".into(),
        }
    }
}
