use super::*;

#[test]
fn journals_keep_the_newest() {
    let mut j = Journal::default();
    for i in 0..(EVENTS as u64 + 5) {
        j.push(i, format!("e{i}"));
    }
    let e = j.events();
    assert_eq!(e.len(), EVENTS);
    assert_eq!(e.last().unwrap().what, format!("e{}", EVENTS + 4));
}
