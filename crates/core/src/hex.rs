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
#[path = "hex_tests.rs"]
mod tests;
