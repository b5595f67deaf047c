use super::*;

#[test]
fn patterns_match_prefix_middle_and_suffix() {
    let p = Pattern::new("midWild_bar*b", "midWild");
    assert!(p.matches("midWild_barab"));
    assert!(p.matches("midWild_bar123b"));
    assert!(p.matches("midWild_barb"));
    assert!(!p.matches("midWild_bara"));
    assert!(!p.matches("midWild_xbarb"));
    let m = Pattern::new("multiWild_foo*bar*baz", "multiWild");
    assert!(m.matches("multiWild_foo123bar456baz"));
    assert!(m.matches("multiWild_foobarbaz"));
    assert!(!m.matches("multiWild_foo123baz"));
    assert!(!m.matches("multiWild_bar456baz"));
    // Prefix and suffix may not overlap.
    assert!(!Pattern::new("k_ab*ba", "k").matches("k_aba"));
}

/// A million per-customer nodes are most of a big snapshot, held in a
/// hash map with room for up to twice as many: a node keeps no copy of its
/// key, value or stats path (the maps' keys are those), only its rule, its
/// children and what `share_threshold` and `value_to_metric` need. It was
/// 88 bytes with the copies (and three allocations).
#[test]
fn a_node_holds_no_copy_of_its_key_or_value() {
    assert!(
        std::mem::size_of::<Node>() <= 40,
        "{}",
        std::mem::size_of::<Node>()
    );
}
