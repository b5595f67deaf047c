use super::*;

#[test]
fn patterns_match_prefix_middle_and_suffix() {
    let p = Pattern::new("midWild_bar*b");
    assert!(p.matches("midWild_barab"));
    assert!(p.matches("midWild_bar123b"));
    assert!(p.matches("midWild_barb"));
    assert!(!p.matches("midWild_bara"));
    assert!(!p.matches("midWild_xbarb"));
    let m = Pattern::new("multiWild_foo*bar*baz");
    assert!(m.matches("multiWild_foo123bar456baz"));
    assert!(m.matches("multiWild_foobarbaz"));
    assert!(!m.matches("multiWild_foo123baz"));
    assert!(!m.matches("multiWild_bar456baz"));
    // Prefix and suffix may not overlap.
    assert!(!Pattern::new("k_ab*ba").matches("k_aba"));
}
