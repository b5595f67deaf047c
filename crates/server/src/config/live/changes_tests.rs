use super::*;

#[test]
fn changes_name_added_removed_and_resized_domains() {
    let before = [("api".to_owned(), 6), ("old".to_owned(), 1)];
    let after = [("api".to_owned(), 7), ("shop".to_owned(), 2)];
    assert_eq!(
        describe_changes(&before, &after),
        "api 7 rules (was 6), +shop 2 rules, -old"
    );
    assert_eq!(
        describe_changes(&after, &after),
        "rules edited; api 7 rules, shop 2 rules"
    );
}
