//! The deploy files: the Prometheus alerts pass promtool, every metric the
//! alerts and the Grafana dashboard name is one sluice exports, and the
//! Kubernetes manifests parse, agree with each other on ports, paths and
//! names, and carry rules that load.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

#[test]
fn alert_rules_pass_promtool() {
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(workspace().join("deploy/prometheus/alerts.yaml"))
        .output()
        .expect("promtool (make test installs Debian's prometheus package)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The exposition parses as Prometheus text, and the linter finds nothing
/// but the one name kept for compatibility.
#[tokio::test]
async fn the_exposition_passes_promtool() {
    let s = Sluice::start(
        &[(
            "web.yaml",
            "domain: web\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )],
        &[],
    );
    let mut c = s.client().await;
    for v in ["a\"b", "c\\d"] {
        ask(&mut c, "web", &[("k", v)]).await;
    }
    let text = s.get("/metrics").1;
    assert!(
        text.contains("sluice_requests_total{code=\"ok\"} 2"),
        "{text}"
    );
    assert!(text.contains(r#"rule="k_a\"b""#), "{text}");
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (make test installs Debian's prometheus package)");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Exit 1 is a parse error; 3 is lint findings, listed one a line.
    assert_ne!(out.status.code(), Some(1), "{said}");
    // Names that are about counters (the memory store's, and the counters
    // endpoints' `sluice_counter_*`), not of the counter type.
    let findings: Vec<_> = said
        .lines()
        .filter(|l| !l.starts_with("sluice_memory_counter_evictions_total "))
        .filter(|l| !l.starts_with("sluice_counter_"))
        .collect();
    assert!(findings.is_empty(), "{said}");
}

#[test]
fn dashboard_and_alerts_name_only_metrics_sluice_exports() {
    let exported = exported_families();
    for file in [
        "deploy/prometheus/alerts.yaml",
        "deploy/grafana/sluice.json",
    ] {
        let text = std::fs::read_to_string(workspace().join(file)).unwrap();
        let names = metric_families(&text);
        assert!(names.len() >= 5, "{file} names {names:?}");
        let unknown: Vec<_> = names.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics sluice does not export: {unknown:?}"
        );
    }
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("deploy/grafana/sluice.json")).unwrap(),
    )
    .unwrap();
    assert!(dash["panels"].as_array().is_some_and(|p| p.len() >= 6));
}

/// The plain manifests (the chart's default render, tests/helm.rs keeps
/// them so): ports, probes and the rules' mount agree, and the ConfigMap's
/// rules are the shipped ones and load.
#[test]
fn kubernetes_manifests_agree_and_their_rules_load() {
    let text = std::fs::read_to_string(workspace().join("deploy/kubernetes/sluice.yaml")).unwrap();
    let objs: Vec<Value> = serde_saphyr::from_multiple::<Value>(&text).unwrap();
    let kind = |k: &str| {
        objs.iter()
            .find(|o| o["kind"] == k)
            .unwrap_or_else(|| panic!("{k}"))
    };
    let (deploy, config) = (kind("Deployment"), kind("ConfigMap"));
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let port = |name: &str| {
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["containerPort"].as_u64().unwrap())
    };
    assert_eq!(port("grpc"), Some(8081));
    assert_eq!(port("admin"), Some(8080));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
    let env = |name: &str| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(env("SLUICE_GRPC_ADDR"), Some(Value::from("0.0.0.0:8081")));
    // The ConfigMap is mounted where SLUICE_CONFIG looks.
    let mount = &c["volumeMounts"][0];
    assert_eq!(Some(mount["mountPath"].clone()), env("SLUICE_CONFIG"));
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(volume["configMap"]["name"], config["metadata"]["name"]);
    the_config_maps_rules_are_shipped_and_load(config);
}

/// The ConfigMap's rules are the shipped ones, and they load.
fn the_config_maps_rules_are_shipped_and_load(config: &Value) {
    // The rules: the shipped ones, and they load.
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in config["data"].as_object().unwrap() {
        let text = text.as_str().unwrap();
        assert_eq!(
            text,
            std::fs::read_to_string(workspace().join("descriptors").join(name)).unwrap(),
            "{name} in the ConfigMap differs from descriptors/"
        );
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let out = sluice_check(dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
