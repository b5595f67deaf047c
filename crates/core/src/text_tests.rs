#[test]
fn cuts_at_a_character_boundary() {
    let mut s = "añb".to_owned();
    assert!(super::cut(&mut s, 2));
    assert_eq!(s, "a");
    let mut short = "ab".to_owned();
    assert!(!super::cut(&mut short, 2));
    assert_eq!(short, "ab");
}
