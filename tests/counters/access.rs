//! Who may look and reset: the token, bad input, an email in clear, and the counters command.

use super::*;

#[tokio::test]
async fn only_the_token_is_let_in_and_a_rotated_token_replaces_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cret-one\n").unwrap();
    let s = start(&["--admin-token-file", file.to_str().unwrap()]);
    let look = body(&[&[("fixed", "k")]]);
    let (code, text) = admin(&s, "POST", "/api/counters", None, &look);
    assert_eq!((code, text.contains("Bearer")), (401, true), "{text}");
    assert_eq!(
        admin(&s, "POST", "/api/counters/reset", Some("nope"), &look).0,
        401
    );
    assert_eq!(
        admin(&s, "POST", "/api/counters", Some("s3cret-one"), &look).0,
        200
    );
    std::fs::write(&file, "s3cret-two-rotated\n").unwrap();
    assert_eq!(
        admin(&s, "POST", "/api/counters", Some("s3cret-one"), &look).0,
        401
    );
    assert_eq!(
        admin(
            &s,
            "POST",
            "/api/counters/reset",
            Some("s3cret-two-rotated"),
            &look
        )
        .0,
        200
    );
    let m = s.get("/metrics").1;
    assert_eq!(
        metric(&m, "sluice_admin_unauthorized_total"),
        Some(3.0),
        "{m}"
    );
    // Without the token the top stays masked; nothing was refused for it.
    let (code, top) = admin(&s, "GET", "/api/counters/top", None, "");
    assert_eq!(
        (code, top.contains("\"clear\":false")),
        (200, true),
        "{top}"
    );
    assert!(eventually(Duration::from_secs(5), || s.logs_contain("counters reset")));
    let logs = s.logs.lock().unwrap().join("\n");
    assert!(!logs.contains("s3cret"), "a token reached the log");
    assert!(
        logs.contains("counters request refused"),
        "refusals are logged"
    );
}

#[tokio::test]
async fn bad_input_is_refused_and_a_reset_touches_no_other_counter() {
    let s = start(&["--max-descriptors", "2"]);
    let mut c = s.client().await;
    for v in ["mine", "other"] {
        assert_eq!(spend(&mut c, &[("fixed", v)], 2).await, 2);
    }
    malformed_resets_are_refused(&s);

    // A reset that meets no limit says so: 404, nothing reset.
    let (code, text) = admin(
        &s,
        "POST",
        "/api/counters/reset",
        None,
        &body(&[&[("nomatch", "x")]]),
    );
    assert_eq!(code, 404, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        (doc["reset"].clone(), doc["counters_reset"].clone()),
        (false.into(), 0.into()),
        "{text}"
    );
    let reset = counters(&s, "/api/counters/reset", None, &[&[("fixed", "mine")]]);
    assert_eq!(limits(&reset)[0]["count"], 2);
    assert_eq!(reset["counters_reset"], 1);
    let other = counters(&s, "/api/counters", None, &[&[("fixed", "other")]]);
    assert_eq!(
        limits(&other)[0]["count"],
        2,
        "another descriptor's counter"
    );
    a_lookup_says_why_no_rule_matched(&s);
}

/// A lookup that meets no rule says why, and a wildcard names its pattern.
fn a_lookup_says_why_no_rule_matched(s: &Sluice) {
    // No rule, and why; a wildcard names its pattern.
    let why = counters(
        s,
        "/api/counters",
        None,
        &[
            &[("tier", "credentials"), ("nope", "x")],
            &[("web", "beacon-7")],
        ],
    );
    let steps = &why["descriptors"][0]["match"];
    assert_eq!(steps["steps"][0]["how"], "exact");
    assert_eq!(steps["steps"][1]["how"], "no_rule");
    assert!(
        steps["why_none"]
            .as_str()
            .unwrap()
            .contains("entry 2 (nope)"),
        "{why}"
    );
    assert_eq!(
        why["descriptors"][1]["match"]["steps"][0]["pattern"],
        "web_beacon*"
    );
    assert_eq!(why["descriptors"][1]["limits"][0]["count"], 0);
}

/// Each malformed reset is a 400 that says what is wrong.
fn malformed_resets_are_refused(s: &Sluice) {
    let cases = [
        ("{\"domain\":", "invalid RateLimitRequest JSON"),
        (
            r#"{"domain":"nowhere","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}"#,
            "nowhere",
        ),
        (
            &*body(&[&[("a", "1")], &[("a", "2")], &[("a", "3")]]),
            "descriptors",
        ),
        (r#"{"domain":"auth","descriptors":[]}"#, "descriptor"),
        (
            r#"{"domain":"auth","descriptors":[{"entries":[]}]}"#,
            "descriptor 1 has no entries",
        ),
    ];
    for (bad, says) in cases {
        let (code, text) = admin(s, "POST", "/api/counters/reset", None, bad);
        assert_eq!(code, 400, "{bad}: {text}");
        assert!(text.contains(says), "{bad}: {text}");
    }
}

/// An operator types the address; the lookup finds the hashed counter. The
/// top in clear (with the token) shows the digest, never the address, with
/// a lookup ready to send; no log line or metric holds the address.
#[tokio::test]
async fn an_email_is_looked_up_in_clear_and_never_reaches_a_log_or_metric() {
    let s = start(&[]);
    let mut c = s.client().await;
    assert_eq!(
        spend(&mut c, &[("email", "Bob.Smith+promo@Example.COM")], 5).await,
        3
    );
    let found = counters(
        &s,
        "/api/counters",
        None,
        &[&[("email", "bob.smith@example.com")]],
    );
    assert_eq!(limits(&found)[0]["count"], 5, "{found}");
    let (code, top) = admin(&s, "GET", "/api/counters/top", None, "");
    assert_eq!(code, 200);
    let top: Value = serde_json::from_str(&top).unwrap();
    assert_eq!(top["clear"], true);
    let key = top["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["rule"] == "email")
        .expect("in the top")
        .clone();
    let digest = key["entries"][0]["value"].as_str().unwrap().to_owned();
    assert_eq!(digest.len(), 32, "{key}");
    assert!(key["command"].as_str().unwrap().contains(&digest));
    let (code, again) = admin(
        &s,
        "POST",
        "/api/counters",
        None,
        &key["lookup"].to_string(),
    );
    assert_eq!(code, 200, "{again}");
    let again: Value = serde_json::from_str(&again).unwrap();
    assert_eq!(
        limits(&again)[0]["count"],
        5,
        "the top's lookup finds the counter"
    );
    counters(
        &s,
        "/api/counters/reset",
        None,
        &[&[("email", "BOB.SMITH@example.com")]],
    );
    assert_eq!(
        spend(&mut c, &[("email", "bob.smith@example.com")], 1).await,
        1
    );
    let logs = s.logs.lock().unwrap().join("\n").to_lowercase();
    let metrics = s.get("/metrics").1.to_lowercase();
    for text in [&logs, &metrics] {
        assert!(!text.contains("bob.smith") && !text.contains("example.com"));
    }
}

#[tokio::test]
async fn the_counters_command_shows_resets_and_lists_the_top() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "cli-token\n").unwrap();
    let s = start(&["--admin-token-file", file.to_str().unwrap()]);
    let mut c = s.client().await;
    assert_eq!(spend(&mut c, &[("fixed", "cli")], 5).await, 3);
    let url = format!("http://{}", s.admin);
    let (ok, _, err) = run(
        &url,
        &["show", "--domain", "auth", "--descriptor", "fixed=cli"],
        None,
    );
    assert!(!ok && err.contains("401"), "{err}");
    let (ok, out, err) = run(
        &url,
        &["show", "--domain", "auth", "--descriptor", "fixed=cli"],
        Some("cli-token"),
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("fixed=cli") && out.contains("refused") && out.contains(" 5 "),
        "{out}"
    );
    let tf = file.to_str().unwrap();
    let (ok, out, err) = run(&url, &["top", "--token-file", tf], None);
    assert!(
        ok && out.contains("sluice counters show --domain auth --descriptor 'fixed=cli'"),
        "{out}{err}"
    );
    let (ok, out, _) = run(
        &url,
        &[
            "reset",
            "--domain",
            "auth",
            "--descriptor",
            "fixed=cli",
            "--json",
        ],
        Some("cli-token"),
    );
    assert!(ok);
    let doc: Value = serde_json::from_str(&out).expect("--json");
    assert_eq!(
        (doc["reset"].clone(), limits(&doc)[0]["count"].clone()),
        (json!(true), json!(5))
    );
    assert_eq!(spend(&mut c, &[("fixed", "cli")], 1).await, 1);
}

/// `sluice counters ARGS --admin URL`, with `token` in its environment:
/// whether it succeeded, its output and its errors.
fn run(url: &str, args: &[&str], token: Option<&str>) -> (bool, String, String) {
    let mut cmd = std::process::Command::new(sluice_bin());
    cmd.arg("counters").args(args).args(["--admin", url]);
    cmd.env_remove("SLUICE_ADMIN_TOKEN");
    if let Some(t) = token {
        cmd.env("SLUICE_ADMIN_TOKEN", t);
    }
    let out = cmd.output().expect("sluice counters");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
