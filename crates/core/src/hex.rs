//! Lowercase hex of digests, for counter keys and hashed values: a table
//! lookup per nibble, no formatting machinery (these run per request).

/// Appends the lowercase hex of `bytes` to `out`.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        for nibble in [b >> 4, b & 0xf] {
            // A nibble is below 16, so the lookup always finds a digit.
            out.push(char::from(
                HEX.get(usize::from(nibble)).copied().unwrap_or(b'0'),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_every_nibble() {
        let mut s = String::from("x:");
        super::push_hex(&mut s, &[0x00, 0x0f, 0xa5, 0xff]);
        assert_eq!(s, "x:000fa5ff");
    }
}
