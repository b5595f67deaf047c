//! The Helm chart (`deploy/helm/sluice`), proven without a cluster: every
//! values profile it ships lints and renders, each object passes the API's
//! own schemas strictly on the oldest and newest Kubernetes the chart
//! supports, every rendered pod meets the hardening policy and its
//! selectors match, what would render a broken release is refused, the
//! rendered container runs for real (probes, a decision, the drain), and
//! `deploy/kubernetes/sluice.yaml` is the chart's default render.
//! What stays unproven offline (admission, the API server's defaulting,
//! scheduling, the kubelet's probing) is in the book's Deploying page.

mod common;
#[path = "helm/policy.rs"]
mod policy;
#[path = "helm/render.rs"]
mod render;
#[path = "helm/run.rs"]
mod run;

use std::path::PathBuf;
use std::process::Command;

use common::workspace;
use serde_json::Value;

/// The values profiles under `ci/` (and the defaults, "default").
const PROFILES: [&str; 9] = [
    "default",
    "memory",
    "memcache",
    "ha-redis",
    "sentinel",
    "cluster",
    "xds",
    "tls",
    "monitoring",
];

/// The oldest and newest Kubernetes the chart supports (Chart.yaml's
/// kubeVersion; kubernetes-validate's newest schemas).
const KUBE_OLDEST: &str = "1.27.0";
const KUBE_NEWEST: &str = "1.37.0";

fn chart() -> PathBuf {
    workspace().join("deploy/helm/sluice")
}

/// helm from `make deps`.
fn helm() -> Command {
    let path = workspace().join(".tools/helm/helm");
    assert!(
        path.exists(),
        "{} is missing: `make deps` installs helm",
        path.display()
    );
    let mut c = Command::new(path);
    // No repositories, plugins or caches of the user's: all under the test's.
    let home = std::env::temp_dir().join("sluice-helm-home");
    for var in ["HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"] {
        c.env(var, &home);
    }
    c
}

/// `helm template` of `profile` with more `args`; Err with helm's words.
fn template(profile: &str, args: &[&str]) -> Result<String, String> {
    let mut c = helm();
    c.args(["template", "sluice"]).arg(chart());
    c.args(["--namespace", "default"]);
    if profile != "default" {
        c.arg("-f")
            .arg(chart().join(format!("ci/{profile}-values.yaml")));
    }
    let out = c.args(args).output().expect("helm");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn render(profile: &str) -> String {
    template(profile, &[]).unwrap_or_else(|e| panic!("{profile}: {e}"))
}

/// The objects of a render.
fn objects(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("the render parses")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// The one object of `kind` (panics unless exactly one).
fn one<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objs.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn find<'a>(objs: &'a [Value], kind: &str) -> Option<&'a Value> {
    objs.iter().find(|o| o["kind"] == kind)
}
