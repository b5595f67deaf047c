use super::*;

/// `n` per-customer rules, in several shapes of YAML (flow and block
/// maps, a comment, nested rules, a list of limits), under a header
/// with a name.
fn rules(n: usize) -> String {
    let mut s = String::from("# generated\nname: billing\ndomain: saas\ndescriptors:\n");
    for i in 0..n {
        if i % 5 == 0 {
            s.push_str(&format!(
                    "  - key: plan\n    value: p{i}\n    descriptors:\n      - key: api_key\n        rate_limits:\n          - {{unit: second, requests_per_unit: {i}}}\n"
                ));
        } else if i % 2 == 0 {
            s.push_str(&format!(
                    "  - key: api_key\n    value: cust{i}\n    rate_limit: {{unit: minute, requests_per_unit: {i}}}\n"
                ));
        } else {
            s.push_str(&format!(
                    "  # customer {i}\n  - key: api_key\n    value: \"cust{i}\"\n    rate_limit:\n      unit: hour\n      requests_per_unit: {i}\n"
                ));
        }
    }
    s
}

fn whole(text: &str) -> DomainFile {
    let root = yaml::parse_all(text, FileBounds::default())
        .expect("parses")
        .remove(0);
    let mut p = Parser {
        file: Path::new("f.yaml"),
        errors: Vec::new(),
    };
    p.check_generic(&root, "", false);
    let df = p.domain_file(&root);
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    df
}

/// Parts read apart are the file read whole, every line and column too.
#[test]
fn parts_read_apart_are_the_file_read_whole() {
    let text = rules(100);
    let parts = split(&text, 0, 300).expect("cut");
    assert!(parts.parts.len() > 10, "{}", parts.parts.len());
    let apart = read(Path::new("f.yaml"), &parts, FileBounds::default()).expect("read");
    assert_eq!(apart.descriptors.len(), 100);
    assert_eq!(format!("{apart:?}"), format!("{:?}", whole(&text)));
}

/// Shapes whose cut is not certain are read whole.
#[test]
fn a_file_not_shaped_for_the_cut_is_not_cut() {
    let list = "  - key: a\n    value: x\n  - key: a\n    value: y\n";
    for text in [
        format!("domain: d\ndescriptors:\n{list}---\ndomain: e\n"),
        format!("descriptors:\n{list}domain: d\n"),
        "domain: d\ndescriptors:\n- key: a\n- key: b\n".to_owned(),
        "domain: d\ndescriptors: [{key: a}, {key: b}]\n".to_owned(),
        "domain: d\n".to_owned(),
    ] {
        assert!(split(&text, 0, 1).is_none(), "{text}");
    }
    assert!(split(&format!("domain: d\ndescriptors:\n{list}"), 1 << 20, 1).is_none());
}

/// A part that fails (an alias whose anchor is in another part, an
/// error, a node bound passed) sends the file to the whole reading.
#[test]
fn a_part_that_fails_sends_the_file_to_the_whole_reading() {
    let f = Path::new("f.yaml");
    let alias = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &l {unit: hour, requests_per_unit: 1}\n  - key: b\n    rate_limit: *l\n";
    let parts = split(alias, 0, 1).expect("cut");
    assert!(read(f, &parts, FileBounds::default()).is_none());
    assert_eq!(whole(alias).descriptors.len(), 2, "read whole, it loads");
    let wrong = format!("{}  - key: z\n    colour: red\n", rules(20));
    let parts = split(&wrong, 0, 100).expect("cut");
    assert!(read(f, &parts, FileBounds::default()).is_none());
    let text = rules(50);
    let parts = split(&text, 0, 100).expect("cut");
    let tight = FileBounds {
        max_nodes: 100,
        ..FileBounds::default()
    };
    assert!(read(f, &parts, tight).is_none(), "the bound is the file's");
}
