//! `sluice health`: the container's health check without curl or a shell.
//! One HTTP/1.1 GET to the admin port's `/healthcheck`; success is a 200.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// Where a probe inside the container reaches an admin listener bound to
/// `addr`: an unspecified address (`0.0.0.0`, `::`) is reached on loopback.
pub fn local(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// GETs `path` on `addr` within `timeout`: `Ok` on a 200, otherwise what was
/// wrong (the status line, or the connection's error).
pub fn check(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("{addr}: {e}"))?;
    let mut reply = Vec::new();
    // The status line is all that matters; the body is small.
    let _ = s.take(4096).read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    let status = text.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else if status.is_empty() {
        Err(format!("{addr}{path}: no answer"))
    } else {
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().trim();
        Err(format!("{addr}{path}: {status} {body}"))
    }
}
