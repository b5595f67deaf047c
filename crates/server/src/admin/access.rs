//! Who may talk to the admin port: a `Host` that is an address, `localhost`
//! or an allowed name (DNS rebinding), and no POST a cross-site page could
//! send.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;

use super::{AdminAccess, AdminState};
use crate::refusal::Refusal;

/// Refuses what a web page could send: a foreign `Host` (DNS rebinding) and
/// cross-site POSTs.
pub(super) async fn guard(State(s): State<AdminState>, req: Request, next: Next) -> Response {
    if let Err(why) = check_access(&s.access, req.method(), req.headers()) {
        return Refusal::Denied(why.to_owned()).into_http();
    }
    next.run(req).await
}

fn check_access(access: &AdminAccess, method: &Method, h: &HeaderMap) -> Result<(), &'static str> {
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
    if let Some(host) = host
        && !host_allowed(access, host)
    {
        return Err("Host is not an address, localhost or an --admin-allowed-hosts name");
    }
    if method == Method::GET || method == Method::HEAD {
        return Ok(());
    }
    if let Some(origin) = h.get(header::ORIGIN) {
        let same = host.is_some_and(|host| {
            origin.as_bytes() == format!("http://{host}").as_bytes()
                || origin.as_bytes() == format!("https://{host}").as_bytes()
        });
        if !same {
            return Err("cross-origin POST refused");
        }
    }
    let simple = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .is_some_and(|t| {
            matches!(
                t.as_str(),
                "text/plain" | "application/x-www-form-urlencoded" | "multipart/form-data"
            )
        });
    if simple {
        return Err("POST with a form or text/plain body refused: send application/json");
    }
    Ok(())
}

/// An IP address (with or without port), `localhost`, or an allowed name.
fn host_allowed(access: &AdminAccess, host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        return rest
            .split(']')
            .next()
            .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok());
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || access.allowed_hosts.contains(&name)
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
