//! HTTP/2 written by hand, for clients no library would be: ones that open
//! streams as fast as the socket takes them and never read.

/// The client preface and an empty SETTINGS frame.
pub fn preface() -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, 0x4, 0, 0, &[]);
    out
}

/// One HTTP/2 frame.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// HEADERS (HPACK without Huffman; nothing added to the table) and DATA for
/// one ShouldRateLimit call carrying `message` (an encoded request).
pub fn call(out: &mut Vec<u8>, stream: u32, authority: &str, message: &[u8]) {
    let path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let mut h = vec![0x83, 0x86]; // :method POST, :scheme http
    h.push(0x04); // :path, literal value
    h.push(path.len() as u8);
    h.extend_from_slice(path.as_bytes());
    h.push(0x01); // :authority
    h.push(authority.len() as u8);
    h.extend_from_slice(authority.as_bytes());
    h.extend_from_slice(&[0x0f, 0x10, 16]); // content-type (static 31)
    h.extend_from_slice(b"application/grpc");
    h.extend_from_slice(&[0x00, 2]);
    h.extend_from_slice(b"te");
    h.push(8);
    h.extend_from_slice(b"trailers");
    frame(out, 0x1, 0x4, stream, &h);
    let mut data = vec![0u8];
    data.extend_from_slice(&(message.len() as u32).to_be_bytes());
    data.extend_from_slice(message);
    frame(out, 0x0, 0x1, stream, &data);
}
