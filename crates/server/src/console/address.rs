//! Finding client addresses in descriptor values however they are written,
//! so the console never shows one in clear: with a port (`1.2.3.4:80`,
//! `[2001:db8::1]:443`), a zone (`fe80::1%eth0`), a prefix length, spaces
//! around it, an `X-Forwarded-For` list, or the forms `inet_aton` reads
//! (`0177.0.0.1`, `0x7f.1`, `127.1`, and for address-named keys a bare
//! integer such as `2130706433`).

use std::net::{IpAddr, Ipv4Addr};

/// The value with every address in it cut to its first half (`203.0.x.x`,
/// `2001:db8:…`), or `None` when it holds none. In a list, a part that is
/// not an address is hidden too (`?`): it may be one in a form not read.
pub(crate) fn mask(key: &str, value: &str) -> Option<String> {
    let addressy = {
        let k = key.to_ascii_lowercase();
        k.contains("addr") || k.contains("ip") || k.contains("forwarded")
    };
    let parts: Vec<Option<IpAddr>> = value.split(',').map(|p| parse(p, addressy)).collect();
    if parts.iter().all(Option::is_none) {
        return None;
    }
    let masked: Vec<String> = parts
        .into_iter()
        .map(|p| p.map_or_else(|| "?".to_owned(), half))
        .collect();
    Some(masked.join(","))
}

fn half(a: IpAddr) -> String {
    match a {
        IpAddr::V4(a) => {
            let [x, y, _, _] = a.octets();
            format!("{x}.{y}.x.x")
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => half(IpAddr::V4(v4)),
            None => {
                let [x, y, ..] = a.segments();
                format!("{x:x}:{y:x}:…")
            }
        },
    }
}

/// One address as written, tolerating what surrounds it.
fn parse(part: &str, addressy: bool) -> Option<IpAddr> {
    let mut s = part.trim();
    s = s.split_once('/').map_or(s, |(a, _)| a);
    // `[v6]:port` or `[v6]`.
    if let Some(rest) = s.strip_prefix('[') {
        s = rest.split_once(']').map_or(rest, |(a, _)| a);
    }
    // A zone: `fe80::1%eth0`.
    s = s.split_once('%').map_or(s, |(a, _)| a);
    if let Ok(a) = s.parse::<IpAddr>() {
        return Some(a);
    }
    // `v4:port`.
    if let Some((host, port)) = s.rsplit_once(':')
        && !host.contains(':')
        && port.bytes().all(|b| b.is_ascii_digit())
    {
        s = host;
    }
    inet_aton(s, addressy).map(IpAddr::V4)
}

/// The forms `inet_aton` accepts: one to four parts, each decimal, octal
/// (leading 0) or hex (0x); the last fills the bytes left. A single part
/// (a bare integer) counts only for a key named like an address.
fn inet_aton(s: &str, addressy: bool) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 || (parts.len() == 1 && !addressy) {
        return None;
    }
    let mut nums = Vec::with_capacity(4);
    for p in &parts {
        nums.push(number(p)?);
    }
    let (last, head) = nums.split_last()?;
    let mut v: u64 = 0;
    for n in head {
        if *n > 255 {
            return None;
        }
        v = (v << 8) | n;
    }
    let room = 8 * (4 - head.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    v = (v << room) | last;
    u32::try_from(v).ok().map(Ipv4Addr::from)
}

fn number(p: &str) -> Option<u64> {
    if p.is_empty() {
        return None;
    }
    if let Some(hex) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    if p.len() > 1 && p.starts_with('0') {
        return u64::from_str_radix(&p[1..], 8).ok();
    }
    p.parse().ok()
}

#[cfg(test)]
#[path = "address_tests.rs"]
mod tests;
