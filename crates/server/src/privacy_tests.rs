use super::*;

#[test]
fn normalises_case_space_and_plus_tags() {
    assert_eq!(normalise_email("  A+1@Example.COM "), "a@example.com");
    assert_eq!(normalise_email("a+2@example.com"), "a@example.com");
    assert_eq!(normalise_email("a@example.com"), "a@example.com");
    assert_eq!(normalise_email("+x@example.com"), "@example.com");
    assert_eq!(normalise_email("no-at-sign"), "no-at-sign");
    // The plus belongs to the local part only.
    assert_eq!(normalise_email("a@ex+ample.com"), "a@ex+ample.com");
}

#[test]
fn variants_share_one_hash_and_no_address_survives() {
    let p = Privacy::default();
    let h = p.protect("A+1@Example.com");
    assert_eq!(h, p.protect("a+2@example.com"));
    assert_ne!(h, p.protect("b@example.com"));
    assert_eq!(h.len(), 32);
    assert!(!h.contains('@') && !h.contains("example"));
    assert_eq!(p.protect("  "), "");
}

#[test]
fn a_secret_changes_the_hash() {
    let plain = Privacy::default().protect("a@example.com");
    let keyed = Privacy::new(vec!["email".into()], Some(b"s3cret".to_vec()));
    let other = Privacy::new(vec!["email".into()], Some(b"other".to_vec()));
    assert_ne!(plain, keyed.protect("a@example.com"));
    assert_ne!(
        keyed.protect("a@example.com"),
        other.protect("a@example.com")
    );
    assert!(format!("{keyed:?}").contains("keyed: true"));
    assert!(!format!("{keyed:?}").contains("s3cret"));
}

#[test]
fn only_configured_keys_are_email_keys() {
    let p = Privacy::new(vec!["email".into(), "mailbox".into()], None);
    assert!(p.is_email_key("mailbox"));
    assert!(!p.is_email_key("remote_address"));
}
