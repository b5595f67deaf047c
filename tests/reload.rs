//! Hot reload on the real binary: edits of every kind apply within a second
//! or two, broken edits change nothing, counters survive, no request fails.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const WITHIN: Duration = Duration::from_secs(2);

fn rules(limit: u32) -> String {
    format!(
        "domain: app\ndescriptors:\n  - key: ip\n    rate_limit: {{unit: day, requests_per_unit: {limit}}}\n"
    )
}

fn limit_line(limit: u32) -> String {
    format!("app.ip: unit=DAY requests_per_unit={limit},")
}

fn ask_json(s: &Sluice, domain: &str, ip: &str) -> (u16, serde_json::Value) {
    let body = format!(
        r#"{{"domain":"{domain}","descriptors":[{{"entries":[{{"key":"ip","value":"{ip}"}}]}}]}}"#
    );
    let (code, text) = s.post("/json", &body);
    (
        code,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{code} {text}")),
    )
}

fn serves_limit(s: &Sluice, limit: u32) -> bool {
    s.get("/rlconfig").1.contains(&limit_line(limit))
}

/// Writes `text` the way editors that save by rename do.
fn save_by_rename(path: &Path, text: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn an_in_place_edit_applies_and_is_logged() {
    let s = Sluice::start(&[("app.yaml", &rules(1))], &[]);
    assert!(serves_limit(&s, 1));
    std::fs::write(s.dir().join("app.yaml"), rules(5)).unwrap();
    assert!(
        eventually(WITHIN, || serves_limit(&s, 5)),
        "edit not applied"
    );
    let (_, v) = ask_json(&s, "app", "1.1.1.1");
    assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 5);
    assert_eq!(s.readyz()["config"]["generation"], 2);
    assert!(eventually(WITHIN, || s.logs_contain("config generation 2 is live")));
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("rules edited; app 1 rules")));
}

#[test]
fn a_rename_over_save_applies() {
    let s = Sluice::start(&[("app.yaml", &rules(1))], &[]);
    save_by_rename(&s.dir().join("app.yaml"), &rules(7));
    assert!(
        eventually(WITHIN, || serves_limit(&s, 7)),
        "rename-over not applied"
    );
}

#[test]
fn added_and_removed_files_add_and_remove_domains() {
    let s = Sluice::start(&[("app.yaml", &rules(1))], &[]);
    let shop = "domain: shop\ndescriptors:\n  - key: ip\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
    std::fs::write(s.dir().join("shop.yaml"), shop).unwrap();
    assert!(
        eventually(WITHIN, || s.get("/rlconfig").1.contains("shop.ip")),
        "new file not loaded"
    );
    assert_eq!(ask_json(&s, "shop", "9").0, 200);
    assert_eq!(ask_json(&s, "shop", "9").0, 429, "the new domain limits");
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s.logs_contain("+shop 1 rules")));

    std::fs::remove_file(s.dir().join("shop.yaml")).unwrap();
    assert!(
        eventually(WITHIN, || !s.get("/rlconfig").1.contains("shop.ip")),
        "removal not applied"
    );
    assert_eq!(
        ask_json(&s, "shop", "9").0,
        200,
        "a removed domain stops limiting"
    );
}

#[cfg(unix)]
#[test]
fn a_kubernetes_data_symlink_swap_applies() {
    use std::os::unix::fs::symlink;
    let dir = config_dir(&[("..2026_11_30_a/app.yaml", &rules(1))]);
    let d = dir.path();
    symlink("..2026_11_30_a", d.join("..data")).unwrap();
    symlink("..data/app.yaml", d.join("app.yaml")).unwrap();
    let s = Sluice::start_in(d, &[]);
    assert!(serves_limit(&s, 1));

    std::fs::create_dir(d.join("..2026_11_30_b")).unwrap();
    std::fs::write(d.join("..2026_11_30_b/app.yaml"), rules(9)).unwrap();
    symlink("..2026_11_30_b", d.join("..data_tmp")).unwrap();
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    std::fs::remove_dir_all(d.join("..2026_11_30_a")).unwrap();
    assert!(
        eventually(WITHIN, || serves_limit(&s, 9)),
        "..data swap not applied"
    );
    drop(s);
}

#[test]
fn a_broken_edit_changes_nothing_until_fixed() {
    let s = Sluice::start(&[("app.yaml", &rules(2))], &[]);
    let path = s.dir().join("app.yaml");
    std::fs::write(&path, "domain: app\ndescriptors:\n  - key: ip\n    rate_limit: {unit: day, requests_per_unit: 2, unlimied: true}\n").unwrap();
    assert!(
        eventually(WITHIN, || !s.readyz()["config"]["last_error"].is_null()),
        "the error never reached /readyz"
    );
    let (code, text) = s.get("/readyz");
    assert_eq!(code, 200, "a load error keeps the service ready");
    assert!(text.contains("app.yaml:4:51: descriptors[0].rate_limit.unlimied: config error, unknown key 'unlimied'"), "{text}");
    assert_eq!(s.readyz()["config"]["generation"], 1);
    let metrics = s.get("/metrics").1;
    assert_eq!(
        metric(&metrics, "sluice_config_load_errors_total"),
        Some(1.0)
    );
    // The old rules still decide.
    assert_eq!(ask_json(&s, "app", "5").0, 200);
    assert_eq!(ask_json(&s, "app", "5").0, 200);
    assert_eq!(ask_json(&s, "app", "5").0, 429);
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("config reload rejected")));
    let logged = s
        .logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("config reload rejected"))
        .count();
    assert_eq!(logged, 1, "the error is logged once");

    std::fs::write(&path, rules(4)).unwrap();
    assert!(
        eventually(WITHIN, || serves_limit(&s, 4)),
        "the fix was not applied"
    );
    assert!(s.readyz()["config"]["last_error"].is_null());
    assert_eq!(s.readyz()["config"]["generation"], 2);
}

#[test]
fn an_emptied_directory_keeps_the_last_rules() {
    let s = Sluice::start(&[("app.yaml", &rules(3))], &[]);
    std::fs::remove_file(s.dir().join("app.yaml")).unwrap();
    assert!(eventually(WITHIN, || !s.readyz()["config"]["last_error"].is_null()));
    let err = s.readyz()["config"]["last_error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(err.contains("holds no *.yaml or *.yml file"), "{err}");
    assert!(serves_limit(&s, 3), "limits stay in force");
    // Polled: the log is read on its own thread.
    assert!(eventually(Duration::from_secs(5), || s
        .logs_contain("the directory is missing or empty")));
    std::fs::write(s.dir().join("app.yaml"), rules(6)).unwrap();
    assert!(eventually(WITHIN, || serves_limit(&s, 6)));
}

#[test]
fn a_deleted_directory_keeps_the_rules_and_a_restored_one_applies() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("rules");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("app.yaml"), rules(3)).unwrap();
    let s = Sluice::start_in(&dir, &[]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(eventually(Duration::from_secs(5), || !s.readyz()["config"]
        ["last_error"]
        .is_null()));
    assert!(serves_limit(&s, 3), "limits stay in force");
    assert_eq!(
        ask_json(&s, "app", "10.0.0.1").0,
        200,
        "requests are still answered"
    );
    // Restored, as a deploy tool would: a new directory at the same path.
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("app.yaml"), rules(7)).unwrap();
    // The watch on the old directory died with it; the 2 s poll finds the new one.
    assert!(
        eventually(Duration::from_secs(6), || serves_limit(&s, 7)),
        "restored rules not applied"
    );
    assert!(s.readyz()["config"]["last_error"].is_null());
}

#[test]
fn sighup_and_post_reload_force_a_reload() {
    let s = Sluice::start(&[("app.yaml", &rules(1))], &["--no-watch"]);
    std::fs::write(s.dir().join("app.yaml"), rules(2)).unwrap();
    s.signal("HUP");
    assert!(
        eventually(WITHIN, || serves_limit(&s, 2)),
        "SIGHUP did not reload"
    );
    assert!(eventually(WITHIN, || s.logs_contain("\"cause\":\"SIGHUP\"")));

    std::fs::write(s.dir().join("app.yaml"), rules(3)).unwrap();
    let (code, text) = s.post("/reload", "");
    assert_eq!(code, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["generation"].as_u64()),
        (Some("reloaded"), Some(3))
    );
    assert!(serves_limit(&s, 3));
    let (code, text) = s.post("/reload", "");
    assert_eq!((code, text.contains("unchanged")), (200, true), "{text}");
    std::fs::write(
        s.dir().join("app.yaml"),
        "domain: app\ndescriptors:\n  - key: ip\n    rate_limit: {unit: fortnight}\n",
    )
    .unwrap();
    let (code, text) = s.post("/reload", "");
    assert_eq!(code, 422);
    assert!(
        text.contains("invalid rate limit unit 'fortnight'"),
        "{text}"
    );
}

#[test]
fn counters_survive_a_limit_change() {
    let s = Sluice::start(&[("app.yaml", &rules(10))], &[]);
    for _ in 0..10 {
        assert_eq!(ask_json(&s, "app", "7").0, 200);
    }
    assert_eq!(ask_json(&s, "app", "7").0, 429);
    std::fs::write(s.dir().join("app.yaml"), rules(20)).unwrap();
    assert!(eventually(WITHIN, || serves_limit(&s, 20)));
    // 11 spent (the rejected one counts, as in the reference): 9 left, not 20.
    for i in 0..9 {
        assert_eq!(
            ask_json(&s, "app", "7").0,
            200,
            "request {i} after raising the limit"
        );
    }
    assert_eq!(ask_json(&s, "app", "7").0, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_fails_during_repeated_reloads() {
    let s = Sluice::start(&[("app.yaml", &rules(1_000_000))], &[]);
    let mut c = s.client().await;
    let path = s.dir().join("app.yaml");
    let writer = std::thread::spawn(move || {
        for i in 1..=20u32 {
            save_by_rename(&path, &rules(1_000_000 + i));
            std::thread::sleep(Duration::from_millis(60));
        }
    });
    let mut answered = 0;
    while !writer.is_finished() {
        let r = ask(&mut c, "app", &[("ip", "load")]).await;
        assert_eq!(r.overall_code, OK);
        let limit = r.statuses[0]
            .current_limit
            .as_ref()
            .expect("a limit")
            .requests_per_unit;
        assert!(
            (1_000_000..=1_000_020).contains(&limit),
            "not a limit any generation had: {limit}"
        );
        answered += 1;
    }
    writer.join().unwrap();
    assert!(
        answered > 20,
        "only {answered} requests ran during the reloads"
    );
    assert!(
        eventually(WITHIN, || serves_limit(&s, 1_000_020)),
        "the last edit was applied"
    );
    let generation = s.readyz()["config"]["generation"].as_u64().unwrap();
    assert!(generation > 2, "reloads happened: generation {generation}");
}

/// Generated per-customer rules, as a billing system writes them.
fn customers(n: usize) -> String {
    let mut s = String::from("domain: saas\ndescriptors:\n");
    for i in 0..n {
        s.push_str(&format!(
            "  - key: api_key\n    value: cust{i:07}\n    rate_limit:\n      unit: minute\n      requests_per_unit: {}\n",
            100 + i % 50
        ));
    }
    s
}

/// A rule file past a bound is refused naming the file, the bound, the
/// flag and the figure; the same flags give `check` and `serve` the same
/// answer, and raising the flag loads it. Before, a file of about 22,000
/// rules failed with "budget breached: Nodes { nodes: 250001 }", naming
/// neither a limit nor a remedy, and nothing could raise it.
#[test]
fn a_rule_file_past_a_bound_is_refused_naming_its_flag() {
    let dir = config_dir(&[("customers.yaml", &customers(30_000))]);
    let check = |flags: &[&str]| {
        let out = std::process::Command::new(sluice_bin())
            .arg("check")
            .args(flags)
            .arg(dir.path())
            .output()
            .expect("check");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = check(&[]);
    assert_eq!(
        (code, text.trim()),
        (Some(0), "saas: 30000 rules"),
        "the defaults take 300,000 nodes"
    );
    for (flag, figure) in [
        ("--max-rule-file-nodes", "100000"),
        ("--max-rule-file-bytes", "500000"),
    ] {
        let (code, text) = check(&[flag, figure]);
        assert_eq!(code, Some(1), "{text}");
        assert!(text.contains("customers.yaml"), "{text}");
        assert!(
            text.contains(&format!("more than {figure}")) && text.contains(flag),
            "{text}"
        );
        // serve refuses it the same way at start.
        let out = std::process::Command::new(sluice_bin())
            .args([
                "serve",
                "--grpc-addr",
                "127.0.0.1:0",
                "--admin-addr",
                "127.0.0.1:0",
                flag,
                figure,
                "--config",
            ])
            .arg(dir.path())
            .output()
            .expect("serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(flag), "{err}");
    }
}
