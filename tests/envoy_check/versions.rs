//! `check --envoy` as a given Envoy reads the config: named by
//! `--envoy-version`, or by the `/config_dump` itself.

use super::*;

/// A `/config_dump` of `envoy/usage.yaml`'s listeners, as Envoy
/// `major.minor` would dump it: its bootstrap's node names the version.
fn dump_of_usage(minor: u64) -> String {
    let text = std::fs::read_to_string(workspace().join("envoy/usage.yaml")).expect("usage.yaml");
    let bootstrap: Value = serde_saphyr::from_str(&text).expect("yaml");
    let listeners: Vec<Value> = bootstrap["static_resources"]["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| serde_json::json!({"listener": l}))
        .collect();
    serde_json::json!({"configs": [
        {
            "@type": "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump",
            "bootstrap": {"node": {"user_agent_build_version": {"version": {"major_number": 1, "minor_number": minor}}}}
        },
        {
            "@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
            "static_listeners": listeners
        }
    ]})
    .to_string()
}

/// A config dump names its Envoy: 1.39's dump of the usage config has
/// every charge after the response flagged as never sent; 1.37's adds the
/// refunds it refuses; 1.40's is clean. `--envoy-version` does the same
/// for a YAML file, and a version that is not one is refused.
#[test]
fn the_envoy_a_dump_names_decides_what_it_does() {
    let rules = workspace().join("descriptors");
    let dir = tempfile::tempdir().expect("tempdir");
    for (minor, code, never_sent, refused) in
        [(39, 1, 5, false), (37, 1, 5, true), (40, 0, 0, false)]
    {
        let dump = dir.path().join(format!("dump-1.{minor}.json"));
        std::fs::write(&dump, dump_of_usage(minor)).expect("write");
        let (got, out, err) = check(&rules, &[&dump], false);
        assert_eq!(got, code, "1.{minor}: {out}{err}");
        assert_eq!(
            out.matches("Envoy 1.40 or later").count(),
            never_sent,
            "1.{minor}: {out}"
        );
        assert_eq!(
            out.contains("Envoy 1.38 or later"),
            refused,
            "1.{minor}: {out}"
        );
    }
    let out = Command::new(sluice_bin())
        .arg("check")
        .arg(&rules)
        .arg("--envoy")
        .arg(workspace().join("envoy/usage.yaml"))
        .args(["--envoy-version", "1.39.3"])
        .output()
        .expect("check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Envoy 1.39 loads it and never sends it"),
        "{text}"
    );
    let bad = Command::new(sluice_bin())
        .arg("check")
        .arg(&rules)
        .arg("--envoy")
        .arg(workspace().join("envoy/usage.yaml"))
        .args(["--envoy-version", "latest"])
        .output()
        .expect("check");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not an Envoy version"));
}
