use super::*;

#[test]
fn specs_parse_with_and_without_urls() {
    let s = Sentinel::parse("mymaster@a:26379, b:26380", None).unwrap();
    assert_eq!(s.master, "mymaster");
    assert_eq!(s.sentinels, ["a:26379", "b:26380"]);
    assert_eq!(s.sentinel_urls(), ["redis://a:26379", "redis://b:26380"]);
    let s = Sentinel::parse("m@rediss://app:pw@a:26379,b:1", Some("sp".into())).unwrap();
    assert_eq!(s.scheme, "rediss");
    assert_eq!(s.credentials.as_deref(), Some("app:pw"));
    assert_eq!(s.sentinel_urls()[1], "rediss://:sp@b:1");
    assert!(!format!("{s} {s:?}").contains("pw"));
    assert!(Sentinel::parse("a:1,b:2", None).is_err());
    assert!(Sentinel::parse("m@", None).is_err());
}
