use super::*;
use crate::metrics::StatDelta;

#[test]
fn mogrifiers_rename_and_tag_as_the_references_do() {
    let m = Mogrifier {
        pattern: regex::Regex::new(r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.total_hits$")
            .unwrap(),
        name: "ratelimit.total_hits".into(),
        tags: vec!["domain:$1".into(), "descriptor:$2".into()],
    };
    let l = line(
        "ratelimit.service.rate_limit.web.k1_v1.total_hits",
        "3",
        "c",
        &["env:test".to_owned()],
        std::slice::from_ref(&m),
    );
    assert_eq!(
        l,
        "ratelimit.total_hits:3|c|#env:test,domain:web,descriptor:k1_v1"
    );
    assert_eq!(line("other.stat", "1", "c", &[], &[m]), "other.stat:1|c");
}

#[test]
fn names_are_sanitised_as_the_reference_does() {
    assert_eq!(
        sanitize("ratelimit.service.rate_limit.d.remote_address_10.0.0.1.total_hits"),
        "ratelimit.service.rate_limit.d.remote_address_10_0_0_1.total_hits"
    );
    assert_eq!(sanitize("a:b|c.d"), "a_b_c.d");
    assert_eq!(sanitize("v1.2.3.total_hits"), "v1.2.3.total_hits");
    assert_eq!(sanitize("x_1.2.3.4.5"), "x_1_2_3_4.5");
}

#[test]
fn increases_are_sent_once_and_packed() {
    let m = Metrics::default();
    let s = m.rule("web", "key1_value1.subkey1");
    s.add(&StatDelta {
        total_hits: 3,
        over_limit: 1,
        ..StatDelta::default()
    });
    let mut sent = Sent::default();
    let lines = sent.lines(&m, &["env:test".to_owned()], &[]);
    assert!(lines.contains(
        &"ratelimit.service.rate_limit.web.key1_value1.subkey1.total_hits:3|c|#env:test".to_owned()
    ));
    assert!(lines.contains(
        &"ratelimit.service.rate_limit.web.key1_value1.subkey1.over_limit:1|c|#env:test".to_owned()
    ));
    assert!(
        sent.lines(&m, &[], &[]).is_empty(),
        "nothing new, nothing sent"
    );
    let many: Vec<String> = (0..300).map(|i| format!("stat.{i}:1|c")).collect();
    let p = packets(&many);
    assert!(p.len() > 1 && p.iter().all(|p| p.len() <= PACKET));
    assert_eq!(p.join("\n").lines().count(), 300);
}
