//! Bounding text that came from outside (error messages, client keys)
//! before it is kept or shown.

/// Cuts `s` to at most `max` bytes, at a character boundary; whether it was
/// cut.
pub fn cut(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    true
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
