//! What helm and the API's schemas say of every profile, what the chart
//! refuses, and the files it carries.

use super::*;

#[test]
fn every_profile_lints_strictly() {
    for profile in PROFILES {
        let mut c = helm();
        c.args(["lint", "--strict"]).arg(chart());
        if profile != "default" {
            c.arg("-f")
                .arg(chart().join(format!("ci/{profile}-values.yaml")));
        }
        succeeded(&c.output().expect("helm"), profile);
    }
}

/// Panics with what the command printed unless it succeeded.
fn succeeded(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each object of each profile against the schemas of the oldest and the
/// newest Kubernetes, strictly (an unknown field fails); the Prometheus
/// Operator's kinds are checked in policy.rs.
#[test]
fn every_object_passes_the_api_schemas_strictly() {
    for profile in PROFILES {
        for kube in [KUBE_OLDEST, KUBE_NEWEST] {
            let text = template(profile, &["--kube-version", kube]).expect("render");
            let mut c = Command::new("python3");
            c.arg(workspace().join("tests/helm/validate.py"));
            c.arg(kube);
            c.stdin(std::process::Stdio::piped());
            c.stdout(std::process::Stdio::piped());
            c.stderr(std::process::Stdio::piped());
            let mut child = c.spawn().expect("python3");
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("write");
            let out = child.wait_with_output().expect("validate.py");
            succeeded(&out, &format!("{profile} on {kube}"));
        }
    }
}

/// What would render a broken release is refused, each with words that say
/// what to change.
#[test]
fn values_that_would_break_a_release_are_refused() {
    let refused: [(&[&str], &str); 11] = [
        (&["--set", "replicaCount=-1"], "replicaCount"),
        (&["--set", "replicaz=2"], "Additional property replicaz"),
        (
            &["--set", "podDisruptionBudget.minAvailable=1"],
            "podDisruptionBudget",
        ),
        (
            &["--set", "podDisruptionBudget.maxUnavailable=0"],
            "would block every node drain",
        ),
        (
            &[
                "--set",
                "podDisruptionBudget.maxUnavailable=null,podDisruptionBudget.minAvailable=2",
            ],
            "would block every node drain",
        ),
        (&["--set", "store.type=memory"], "counts in each pod alone"),
        (
            &["--set", "store.existingSecret="],
            "needs store.existingSecret",
        ),
        (&["--set", "image.tag=latest"], "image.tag"),
        (&["--set", "rules.source=xds"], "needs rules.xds.server"),
        (&["--set", "store.type=etcd"], "store.type"),
        (
            &["--set", "store.type=memcache,store.memcacheServers=m:11211"],
            "memcached cannot",
        ),
    ];
    for (args, words) in refused {
        match template("default", args) {
            Ok(_) => panic!("{args:?} rendered"),
            Err(e) => assert!(e.contains(words), "{args:?}: {e}"),
        }
    }
    // One replica on memory is the profile that allows it.
    assert!(template("memory", &[]).is_ok());
    assert!(template("memory", &["--set", "autoscaling.enabled=true"]).is_err());
}

/// `deploy/kubernetes/sluice.yaml` is the chart's default render, for those
/// who apply plain manifests.
#[test]
fn the_plain_manifests_are_the_charts_default_render() {
    let path = workspace().join("deploy/kubernetes/sluice.yaml");
    let file = std::fs::read_to_string(&path).expect("deploy/kubernetes/sluice.yaml");
    let body = file
        .split_once("\n---\n")
        .map(|(_, rest)| format!("---\n{rest}"))
        .expect("a header, then the render");
    assert!(
        body == render("default"),
        "deploy/kubernetes/sluice.yaml drifted from the chart: rerun the command at its top"
    );
}

/// The chart carries the shipped alerts, dashboard and example rules as
/// they are (helm reads only files inside the chart).
#[test]
fn the_charts_files_are_the_shipped_ones() {
    let pairs = [
        ("deploy/prometheus/alerts.yaml", "files/alerts.yaml"),
        ("deploy/grafana/sluice.json", "files/dashboard.json"),
        ("descriptors/api.yaml", "files/rules/api.yaml"),
        ("descriptors/usage.yaml", "files/rules/usage.yaml"),
    ];
    for (shipped, copy) in pairs {
        let a = std::fs::read_to_string(workspace().join(shipped)).expect(shipped);
        let b = std::fs::read_to_string(chart().join(copy)).expect(copy);
        assert!(a == b, "{copy} differs from {shipped}: copy it over");
    }
    let rules = std::fs::read_dir(workspace().join("descriptors"))
        .expect("descriptors/")
        .count();
    let copies = std::fs::read_dir(chart().join("files/rules"))
        .expect("files/rules")
        .count();
    assert_eq!(
        rules, copies,
        "files/rules holds descriptors/ and nothing else"
    );
}
