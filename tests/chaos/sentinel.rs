//! A Sentinel's answer naming a master (`SENTINEL get-master-addr-by-name`:
//! `*2`, the host, the port), with the port replaced by what the link's
//! proxy in front of that master listens on.

/// The host every server of the harness listens on, as RESP's bulk string.
const HOST: &[u8] = b"$9\r\n127.0.0.1\r\n$";

/// `bytes` with each port that follows [`HOST`] replaced by `rename`'s.
/// The answers are a few dozen bytes and arrive whole on loopback.
pub fn rename_masters(bytes: &[u8], mut rename: impl FnMut(u16) -> u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 8);
    let mut rest = bytes;
    while let Some(at) = find(rest, HOST) {
        let (head, tail) = rest.split_at(at + HOST.len());
        out.extend_from_slice(head);
        rest = tail;
        let Some((port, used)) = port(tail) else {
            continue;
        };
        let named = rename(port).to_string();
        out.extend_from_slice(format!("{}\r\n{named}\r\n", named.len()).as_bytes());
        rest = &tail[used..];
    }
    out.extend_from_slice(rest);
    out
}

/// The port of `<len>\r\n<digits>\r\n`, and the bytes it took.
fn port(bytes: &[u8]) -> Option<(u16, usize)> {
    let nl = find(bytes, b"\r\n")?;
    let len: usize = std::str::from_utf8(&bytes[..nl]).ok()?.parse().ok()?;
    let digits = bytes.get(nl + 2..nl + 2 + len)?;
    let port = std::str::from_utf8(digits).ok()?.parse().ok()?;
    (bytes.get(nl + 2 + len..nl + 4 + len)? == b"\r\n").then_some((port, nl + 4 + len))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn a_masters_port_is_renamed_and_the_rest_passes() {
    let answer = b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n+OK\r\n";
    let got = rename_masters(answer, |p| if p == 6379 { 40123 } else { p });
    assert_eq!(got, b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\n40123\r\n+OK\r\n");
    assert_eq!(rename_masters(b"+PONG\r\n", |_| 1), b"+PONG\r\n");
}
