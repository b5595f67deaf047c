//! `sluice counters show|reset|top`: the counters endpoints from a shell.
//! One HTTP/1.1 exchange with the admin port (`--admin http://host:port`),
//! the token from `--token-file` or `SLUICE_ADMIN_TOKEN`, and the answer as
//! a table (or the JSON with `--json`).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{Value, json};

use crate::table::{at, cell, columns};

/// Bytes of an answer read at most.
const MAX_ANSWER: u64 = 4 << 20;

/// What a call came to: the HTTP status and the body.
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// `http://host:port` (a trailing `/` allowed) to `host:port`.
fn authority(admin: &str) -> Result<&str, String> {
    let rest = admin
        .strip_prefix("http://")
        .ok_or_else(|| format!("--admin {admin}: expected http://host:port"))?;
    Ok(rest.trim_end_matches('/'))
}

/// One request to the admin port.
pub fn call(
    admin: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Answer, String> {
    let host = authority(admin)?;
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{host}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("{host}: {e}"))?;
    let mut raw = Vec::new();
    s.take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .map_err(|e| format!("{host}: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{host}{path}: no HTTP answer"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Ok(Answer { status, body })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        let (Some(chunk), Some(after)) = (rest.get(..n), rest.get(n + 2..)) else {
            break;
        };
        if n == 0 {
            break;
        }
        out.push_str(chunk);
        s = after;
    }
    out
}

/// The lookup body for `domain` and descriptors written `k=v,k=v`.
pub fn body(domain: &str, descriptors: &[String]) -> Result<Value, String> {
    let descriptors: Result<Vec<Value>, String> = descriptors
        .iter()
        .map(|d| {
            let entries: Result<Vec<Value>, String> = d
                .split(',')
                .map(|e| {
                    let (k, v) = e.split_once('=').ok_or_else(|| {
                        format!("--descriptor {d}: expected key=value[,key=value]")
                    })?;
                    Ok(json!({"key": k.trim(), "value": v.trim()}))
                })
                .collect();
            Ok(json!({"entries": entries?}))
        })
        .collect();
    Ok(json!({"domain": domain, "descriptors": descriptors?}))
}

/// The lookup (or reset) as a table: a line per limit.
pub fn table(doc: &Value) -> String {
    let reset = at(doc, "/reset").as_bool() == Some(true);
    let count = if reset { "COUNT BEFORE" } else { "COUNT" };
    let mut rows = vec![
        [
            "DESCRIPTOR",
            "RULE",
            "SHAPE",
            "LIMIT",
            count,
            "REMAINING",
            "RESET",
            "NEXT REQUEST",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut notes = String::new();
    for d in at(doc, "/descriptors").as_array().into_iter().flatten() {
        let shown: Vec<String> = at(d, "/entries")
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| format!("{}={}", cell(at(e, "/key")), cell(at(e, "/value"))))
            .collect();
        let shown = shown.join(",");
        let limits = at(d, "/limits").as_array().cloned().unwrap_or_default();
        if limits.is_empty() {
            let why = if at(d, "/unlimited").as_bool() == Some(true) {
                "unlimited".to_owned()
            } else {
                format!("no limit: {}", cell(at(d, "/match/why_none")))
            };
            notes.push_str(&format!("{shown}: {why}\n"));
        }
        for l in limits {
            let mut next = if at(&l, "/over_limit").as_bool() == Some(true) {
                "refused".to_owned()
            } else {
                "admitted".to_owned()
            };
            if at(&l, "/shadow_mode").as_bool() == Some(true) {
                next.push_str(" (shadow mode: passes)");
            }
            rows.push(vec![
                shown.clone(),
                cell(at(&l, "/rule")),
                cell(at(&l, "/shape")),
                cell(at(&l, "/limit")),
                cell(at(&l, "/count")),
                cell(at(&l, "/remaining")),
                format!("{}s", cell(at(&l, "/reset_seconds"))),
                next,
            ]);
        }
    }
    columns(&rows) + &notes
}

/// The top as a table, with the command that looks each key up.
pub fn top_table(doc: &Value) -> String {
    let mut rows = vec![vec![
        "REFUSED".to_owned(),
        "RULE".into(),
        "LOOK IT UP".into(),
    ]];
    for k in at(doc, "/keys").as_array().into_iter().flatten() {
        let what = match at(k, "/command").as_str() {
            Some(cmd) => vec![cell(at(k, "/rule")), cmd.to_owned()],
            None => vec![
                cell(at(k, "/key")),
                "(masked: send the token to see it)".into(),
            ],
        };
        rows.push([vec![cell(at(k, "/over_limit"))], what].concat());
    }
    columns(&rows)
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
