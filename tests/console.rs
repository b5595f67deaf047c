//! The console in a real headless Chromium: it loads with no console errors
//! and no request beyond sluice's admin port, shows a rule turning
//! over-limit within seconds of a flood, the store degraded while Redis is
//! down, and a broken rule file's error. A screenshot under load is saved as
//! `target/tmp/console-under-load.png` (an artifact of the run, not in git).

mod common;

use std::time::Duration;

use common::Sluice;
use common::browser::Browser;
use common::redis::RedisServer;

const RULES: &str = "domain: api
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 5
  - key: masked_remote_address
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 3
";

fn decide(sluice: &Sluice, key: &str, value: &str) -> u16 {
    let body = format!(
        r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"{key}","value":"{value}"}}]}}]}}"#
    );
    sluice.post("/json", &body).0
}

#[test]
fn the_console_shows_what_the_limiter_is_doing() {
    let mut redis = RedisServer::start();
    let sluice = Sluice::start(
        &[("api.yaml", RULES)],
        &["--redis-url", &redis.url(), "--redis-timeout", "100ms"],
    );
    let browser = Browser::start();
    // Chromium's own start-up pages are not the console's doing.
    browser.goto("about:blank");
    browser.requests();
    browser.console_errors();
    let origin = format!("http://{}", sluice.admin);
    browser.goto(&format!("{origin}/"));
    let wait = Duration::from_secs(15);
    assert!(
        browser.wait_for(wait, |b| b.text("#status") == "ready"),
        "status: {:?}",
        browser.text("#status")
    );
    assert!(browser.text("#rules").contains("per_user"));

    a_flood_shows_its_rule_blocking_and_its_top_keys(&browser, &sluice);

    // Redis stops: the console says degraded, and what decides.
    redis.kill();
    for _ in 0..10 {
        decide(&sluice, "user", "bob");
    }
    assert!(
        browser.wait_for(wait, |b| b.text("#status") == "degraded"
            && b.text("#store-in-use") == "memory-fallback"),
        "status {:?}, store {:?}",
        browser.text("#status"),
        browser.text("#store-in-use")
    );
    assert!(browser.text("#failovers").contains("store down"));

    // A broken rule file: its error, with file and line, and the old rules stay.
    std::fs::write(
        sluice.dir().join("broken.yaml"),
        "domain: web\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .unwrap();
    assert!(
        browser.wait_for(wait, |b| b.text("#config-error").contains("broken.yaml:4")),
        "config error: {:?}",
        browser.text("#config-error")
    );
    assert!(browser.text("#loads").contains("load rejected"));

    only_sluice_was_asked_and_nothing_failed(&browser, &origin);
}

/// Nothing but sluice's own port was asked, and no errors in the page's
/// console.
fn only_sluice_was_asked_and_nothing_failed(browser: &Browser, origin: &str) {
    // Nothing but sluice's own port, and no errors in the page's console.
    let requests = browser.requests();
    assert!(
        requests.iter().any(|u| u.ends_with("/api/console")),
        "{requests:?}"
    );
    // Anything that goes over a network (http, https, ws, wss) must be
    // sluice's admin port.
    let foreign: Vec<_> = requests
        .iter()
        .filter(|u| {
            ["http:", "https:", "ws:", "wss:"]
                .iter()
                .any(|s| u.starts_with(s))
        })
        .filter(|u| !u.starts_with(&format!("{origin}/")))
        .collect();
    assert!(foreign.is_empty(), "requests beyond sluice: {foreign:?}");
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

/// A flood on one user and one client address: the rule is shown blocking,
/// the top keys name the user and the masked address, and a screenshot is
/// taken.
fn a_flood_shows_its_rule_blocking_and_its_top_keys(browser: &Browser, sluice: &Sluice) {
    // A flood on one user and one client address.
    let mut over = 0;
    for _ in 0..40 {
        over += usize::from(decide(sluice, "user", "alice") == 429);
        over += usize::from(decide(sluice, "masked_remote_address", "203.0.113.7/32") == 429);
    }
    assert!(over >= 60, "{over} over-limit answers");
    let blocking = |b: &Browser| {
        b.script("return document.querySelector('tr[data-rule=\"api/user\"]')?.className ?? ''")
            == "blocking"
    };
    assert!(
        browser.wait_for(Duration::from_secs(6), blocking),
        "the flooded rule is not shown blocking: {}",
        browser.text("#rules")
    );
    let top = browser.text("#top-keys");
    assert!(top.contains("user=alice"), "{top}");
    // The client address is masked by default.
    assert!(
        top.contains("203.0.x.x~") && !top.contains("113.7"),
        "{top}"
    );
    // Where cargo keeps test output, wherever the target directory is.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-under-load.png");
    browser.screenshot(&shot);
    assert!(std::fs::metadata(&shot).expect("screenshot").len() > 10_000);
}

#[test]
fn the_console_document_is_bounded_and_served_with_a_strict_policy() {
    let sluice = Sluice::start(&[("api.yaml", RULES)], &[]);
    let (code, page) = sluice.get("/");
    assert_eq!(code, 200);
    assert!(page.contains("/console.js"));
    let (code, doc) = sluice.get("/api/console");
    assert_eq!(code, 200);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["domains"][0]["rules"].as_array().unwrap().len(), 2);
    assert_eq!(doc["top_keys"]["window_seconds"], 60);
    // The page may load script and style from its own port only.
    let resp = ureq::get(format!("http://{}/", sluice.admin))
        .call()
        .expect("GET /");
    let csp = resp
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    // A page for operators, yet still behind the Host check (DNS rebinding).
    use std::io::{Read, Write};
    let mut t = std::net::TcpStream::connect(sluice.admin).unwrap();
    t.write_all(b"GET /api/console HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = t.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

/// A domain of a rule per customer: the document names how many rules
/// there are and shows only those with traffic lately, the busiest first,
/// so ten thousand quiet customers cost the page nothing.
#[test]
fn a_big_domain_shows_its_busiest_rules_only() {
    let mut rules = String::from("domain: api\ndescriptors:\n");
    for i in 0..10_000 {
        rules.push_str(&format!(
            "  - key: user\n    value: cust{i}\n    rate_limit: {{unit: minute, requests_per_unit: 1000}}\n"
        ));
    }
    let sluice = Sluice::start(&[("api.yaml", &rules)], &[]);
    let doc = || -> (usize, serde_json::Value) {
        let (code, text) = sluice.get("/api/console");
        assert_eq!(code, 200, "{text}");
        (text.len(), serde_json::from_str(&text).expect("json"))
    };
    let (_, quiet) = doc();
    assert_eq!(quiet["domains"][0]["rules_total"], 10_000);
    assert_eq!(quiet["domains"][0]["complete"], false);
    assert_eq!(
        quiet["domains"][0]["rules"].as_array().map(Vec::len),
        Some(0)
    );
    let shown = |d: &serde_json::Value| -> Vec<String> {
        d["domains"][0]["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["rule"].as_str().map(str::to_owned))
            .collect()
    };
    let busiest = ["user_cust4242", "user_cust7"];
    let seen = common::eventually(Duration::from_secs(30), || {
        for _ in 0..3 {
            assert_eq!(decide(&sluice, "user", "cust4242"), 200);
        }
        assert_eq!(decide(&sluice, "user", "cust7"), 200);
        shown(&doc().1) == busiest
    });
    let (bytes, last) = doc();
    assert!(seen, "{:?}", shown(&last));
    assert!(
        bytes < 64 * 1024,
        "{bytes} bytes for two rules with traffic"
    );
}

/// The console's counters: who is refused now (masked without the token,
/// in clear with it), one click to look a key up and see why, and a reset
/// that lets the client in again; a wrong token is refused with sluice's
/// own words.
#[test]
fn the_console_looks_a_refused_client_up_and_resets_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "console-token\n").unwrap();
    // An hour's window with room left: a minute's could roll over between
    // the flood and the lookup on a slow run, and leave nothing refused.
    let rules = RULES.replace("unit: minute", "unit: hour");
    common::stack::room_in_window(3600, 120);
    let sluice = Sluice::start(
        &[("api.yaml", &rules)],
        &["--admin-token-file", file.to_str().unwrap()],
    );
    for _ in 0..8 {
        decide(&sluice, "user", "alice");
    }
    assert_eq!(decide(&sluice, "user", "alice"), 429);
    let browser = Browser::start();
    browser.goto(&format!("http://{}/", sluice.admin));
    let wait = Duration::from_secs(15);
    assert!(browser.wait_for(wait, |b| b.text("#status") == "ready"));
    the_token_brings_the_refused_keys_in_clear(&browser, wait);
    // One click: the key is looked up, and the table says why it is refused.
    browser.script("document.querySelector('#counter-refused button.pick').click(); return true");
    assert!(
        browser.wait_for(wait, |b| b.text("#counter-result").contains("refused")),
        "{} / {}",
        browser.text("#counter-result"),
        message(&browser)
    );
    let result = browser.text("#counter-result");
    assert!(
        result.contains("user=alice") && result.contains("key_only"),
        "{result}"
    );
    click(&browser, "counter-reset");
    assert!(
        browser.wait_for(wait, |b| message(b).contains("counts before")),
        "{}",
        message(&browser)
    );
    assert_eq!(
        decide(&sluice, "user", "alice"),
        200,
        "let in after the reset"
    );
    let errors = browser.console_errors();
    // The 401 the page provoked on purpose is the only one allowed.
    assert!(
        errors.iter().all(|e| e.contains("401")),
        "console errors: {errors:?}"
    );
}

/// Clicks the console's element `id`.
fn click(browser: &Browser, id: &str) {
    browser.script(&format!(
        "document.getElementById('{id}').click(); return true"
    ));
}

/// What the counters panel says.
fn message(b: &Browser) -> String {
    b.text("#counter-message")
}

/// Without a token the refused keys are masked, a wrong one is a 401, and
/// the right one lists them in clear, with a button each.
fn the_token_brings_the_refused_keys_in_clear(browser: &Browser, wait: Duration) {
    click(browser, "counter-top");
    assert!(
        browser.wait_for(wait, |b| message(b).contains("masked")),
        "{}",
        message(browser)
    );
    browser.script("document.getElementById('counter-token').value = 'wrong'; return true");
    click(browser, "counter-top");
    assert!(
        browser.wait_for(wait, |b| message(b).contains("401")),
        "{}",
        message(browser)
    );
    browser.script("document.getElementById('counter-token').value = 'console-token'; return true");
    click(browser, "counter-top");
    // The masked list of the first click names the key too, but has no
    // button: wait for the list the token brings.
    assert!(
        browser.wait_for(wait, |b| message(b).contains("in clear")
            && b.text("#counter-refused").contains("user=alice")),
        "{} / {}",
        browser.text("#counter-refused"),
        message(browser)
    );
}

/// The console's usage chart: a shadow-mode rule's distribution drawn with
/// its limit marked, and a limit typed into it answered with whom it would
/// refuse (the office and the bot of the book's example in Choosing a limit).
#[test]
fn the_console_charts_usage_and_answers_a_typed_limit() {
    let rules = "domain: auth
descriptors:
  - key: ip
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
";
    common::stack::room_in_window(3600, 120);
    let sluice = Sluice::start(&[("auth.yaml", rules)], &[]);
    let mut totals: Vec<u64> = (0..50).map(|i| 1 + i % 3).collect();
    totals.extend([25, 120]);
    for (i, n) in totals.iter().enumerate() {
        let body = format!(
            r#"{{"domain":"auth","descriptors":[{{"entries":[{{"key":"ip","value":"198.51.100.{i}"}}]}}]}}"#
        );
        for _ in 0..*n {
            assert_eq!(sluice.post("/json", &body).0, 200, "shadow mode passes");
        }
    }
    let browser = Browser::start();
    browser.goto(&format!("http://{}/", sluice.admin));
    let wait = Duration::from_secs(15);
    assert!(
        browser.wait_for(wait, |b| b.text("#usage-answer").contains("of 52 clients")),
        "{}",
        browser.text("#usage-answer")
    );
    assert!(
        browser
            .text("#usage-answer")
            .contains("would refuse 2 of 52")
    );
    let bars = |b: &Browser| {
        b.script("return document.querySelectorAll('#usage-chart rect.refused').length")
            .as_u64()
            .unwrap_or(0)
    };
    assert!(bars(&browser) > 0, "the refused levels are drawn");
    assert!(
        browser
            .script("return document.querySelectorAll('#usage-chart line.limit').length")
            .as_u64()
            == Some(1)
    );
    browser.script(
        "const i = document.getElementById('usage-limit'); i.value = '30'; i.dispatchEvent(new Event('input')); return true",
    );
    assert!(
        browser.wait_for(wait, |b| b
            .text("#usage-answer")
            .contains("a limit of 30 would refuse 1 of 52")),
        "{}",
        browser.text("#usage-answer")
    );
    let errors = browser.console_errors();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}
