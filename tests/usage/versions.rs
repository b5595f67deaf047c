//! What the Envoy running the tests does of the shipped usage config.

use common::stack::{envoy_bin, envoy_version};

use super::*;

/// On whichever Envoy runs the tests: Envoy's own validation loads the
/// shipped usage config from 1.38 on, and `sluice check --envoy-version` of
/// that Envoy says what it lacks: clean from 1.40, every charge after the
/// response below it, and `is_negative_hits` where Envoy refuses it.
#[test]
fn check_says_what_this_envoy_does_of_the_usage_config() {
    let (major, minor) = envoy_version();
    let out = Command::new(common::sluice_bin())
        .args(["check", "descriptors", "--envoy", "envoy/usage.yaml"])
        .args(["--envoy-version", &format!("{major}.{minor}")])
        .current_dir(workspace())
        .output()
        .expect("sluice check");
    let text = String::from_utf8_lossy(&out.stdout);
    let loads = Command::new(envoy_bin())
        .args(["--mode", "validate", "-c", "envoy/usage.yaml"])
        .current_dir(workspace())
        .output()
        .expect("envoy --mode validate")
        .status
        .success();
    assert_eq!(
        loads,
        (major, minor) >= (1, 38),
        "Envoy {major}.{minor} validating envoy/usage.yaml"
    );
    if (major, minor) >= USAGE_ENVOY {
        assert!(out.status.success() && text.contains("0 errors"), "{text}");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{text}");
    let never_sent = text.matches("needs Envoy 1.40 or later").count();
    assert_eq!(never_sent, 5, "every charge at stream done: {text}");
    assert_eq!(
        text.contains("is_negative_hits needs Envoy 1.38"),
        !loads,
        "{text}"
    );
}
