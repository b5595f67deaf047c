//! Where a store names its own servers, the port of each, replaced by the
//! port of the link's proxy in front of that server: a Sentinel's answer
//! naming a master (`*2`, the host, the port as a bulk string), a
//! Cluster's `CLUSTER SLOTS` (the host, the port as an integer) and its
//! `MOVED` and `ASK` redirections (`host:port`). Every server of the
//! harness listens on 127.0.0.1; the answers are a few hundred bytes and
//! arrive whole on loopback (one split across two reads is passed as it
//! is, and that instance reaches that server directly: a weaker fault,
//! never a wrong count).

const HOST: &[u8] = b"127.0.0.1";

/// `bytes` with each server's port replaced by `rename`'s.
pub fn rename_servers(bytes: &[u8], mut rename: impl FnMut(u16) -> u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    let mut rest = bytes;
    while let Some(at) = find(rest, HOST) {
        let (head, tail) = rest.split_at(at + HOST.len());
        out.extend_from_slice(head);
        rest = tail;
        if let Some((form, port, used)) = named_port(tail) {
            let named = rename(port).to_string();
            out.extend_from_slice(&form.write(&named));
            rest = &tail[used..];
        }
    }
    out.extend_from_slice(rest);
    out
}

/// How a port follows the host.
#[derive(Clone, Copy)]
enum Form {
    /// `\r\n$<len>\r\n<port>\r\n`: a bulk string (a Sentinel's answer).
    Bulk,
    /// `\r\n:<port>\r\n`: an integer (`CLUSTER SLOTS`).
    Integer,
    /// `:<port>`: a redirection's address, up to its end.
    Colon,
}

impl Form {
    fn write(self, port: &str) -> Vec<u8> {
        match self {
            Form::Bulk => format!("\r\n${}\r\n{port}\r\n", port.len()),
            Form::Integer => format!("\r\n:{port}\r\n"),
            Form::Colon => format!(":{port}"),
        }
        .into_bytes()
    }
}

/// The port that follows a host at the start of `bytes`, its form and
/// the bytes it took.
fn named_port(bytes: &[u8]) -> Option<(Form, u16, usize)> {
    if let Some(rest) = bytes.strip_prefix(b"\r\n$") {
        let (len, after) = digits(rest)?;
        let body = after.strip_prefix(b"\r\n")?;
        let (port, tail) = digits(body)?;
        let used = bytes.len() - tail.len();
        return (tail.starts_with(b"\r\n") && body.len() - tail.len() == usize::from(len))
            .then_some((Form::Bulk, port, used + 2));
    }
    if let Some(rest) = bytes.strip_prefix(b"\r\n:") {
        let (port, tail) = digits(rest)?;
        return tail.starts_with(b"\r\n").then_some((
            Form::Integer,
            port,
            bytes.len() - tail.len() + 2,
        ));
    }
    let rest = bytes.strip_prefix(b":")?;
    let (port, tail) = digits(rest)?;
    Some((Form::Colon, port, bytes.len() - tail.len()))
}

/// The number at the start of `bytes` (one that fits a port), and what
/// follows it.
fn digits(bytes: &[u8]) -> Option<(u16, &[u8])> {
    let n = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let port = std::str::from_utf8(bytes.get(..n)?).ok()?.parse().ok()?;
    Some((port, &bytes[n..]))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn each_servers_port_is_renamed_and_the_rest_passes() {
    let to = |p: u16| p + 30000;
    let sentinel = b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n+OK\r\n";
    assert_eq!(
        rename_servers(sentinel, to),
        b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\n36379\r\n+OK\r\n"
    );
    let slots = b"*1\r\n*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n";
    assert_eq!(
        rename_servers(slots, to),
        b"*1\r\n*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:37000\r\n$2\r\nid\r\n"
    );
    let moved = b"-MOVED 3999 127.0.0.1:7001\r\n";
    assert_eq!(
        rename_servers(moved, to),
        b"-MOVED 3999 127.0.0.1:37001\r\n"
    );
    assert_eq!(rename_servers(b"+PONG\r\n", to), b"+PONG\r\n");
}
