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
mod tests {
    #[test]
    fn cuts_at_a_character_boundary() {
        let mut s = "añb".to_owned();
        assert!(super::cut(&mut s, 2));
        assert_eq!(s, "a");
        let mut short = "ab".to_owned();
        assert!(!super::cut(&mut short, 2));
        assert_eq!(short, "ab");
    }
}
