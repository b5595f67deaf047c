#[test]
fn encodes_every_nibble() {
    let mut s = String::from("x:");
    super::push_hex(&mut s, &[0x00, 0x0f, 0xa5, 0xff]);
    assert_eq!(s, "x:000fa5ff");
}
