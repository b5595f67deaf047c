//! The hardening policy over every rendered pod, and the selectors and
//! ports that tie the objects together.

use super::*;

/// A Kubernetes resource quantity ("100m", "128Mi", 2) in base units.
fn quantity(v: &Value) -> Option<f64> {
    if let Some(n) = v.as_f64() {
        return Some(n);
    }
    let s = v.as_str()?;
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (n, suffix) = s.split_at(split);
    let scale = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return None,
    };
    Some(n.parse::<f64>().ok()? * scale)
}

/// Every pair of `want` is among `labels`.
fn selects(want: &Value, labels: &Value) -> bool {
    let want = want.as_object().expect("a selector");
    !want.is_empty() && want.iter().all(|(k, v)| labels[k] == *v)
}

/// The environment variable `name` of container `c`.
fn env<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| &e["value"])
}

fn seconds(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_str)
        .and_then(|s| s.strip_suffix('s')?.parse().ok())
        .expect("a duration in seconds")
}

fn pod_is_hardened(profile: &str, pod: &Value) {
    let sc = &pod["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{profile}");
    assert!(sc["runAsUser"].as_u64().is_some_and(|u| u > 0), "{profile}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{profile}");
    assert_eq!(pod["automountServiceAccountToken"], false, "{profile}");
    let period = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace period");
    for c in pod["containers"].as_array().expect("containers") {
        container_is_hardened(profile, c, period);
    }
}

/// One container: locked down, pinned, bounded, probed on its own ports,
/// its drain inside the pod's grace `period`.
fn container_is_hardened(profile: &str, c: &Value, period: u64) {
    {
        let csc = &c["securityContext"];
        assert_eq!(csc["allowPrivilegeEscalation"], false, "{profile}");
        assert_eq!(csc["readOnlyRootFilesystem"], true, "{profile}");
        assert_ne!(csc["privileged"], true, "{profile}");
        assert!(
            csc["capabilities"]["drop"]
                .as_array()
                .is_some_and(|d| d.contains(&"ALL".into()))
        );
        let image = c["image"].as_str().expect("image");
        let tagged =
            image.contains('@') || image.rsplit('/').next().is_some_and(|l| l.contains(':'));
        assert!(
            tagged && !image.ends_with(":latest"),
            "{profile}: image {image}"
        );
        let r = &c["resources"];
        for (part, what) in [
            ("requests", "cpu"),
            ("requests", "memory"),
            ("limits", "memory"),
        ] {
            assert!(
                quantity(&r[part][what]).is_some(),
                "{profile}: resources.{part}.{what} {}",
                r[part][what]
            );
        }
        assert!(quantity(&r["requests"]["memory"]) <= quantity(&r["limits"]["memory"]));
        let ports: Vec<&Value> = c["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| &p["name"])
            .collect();
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let port = &c[probe]["httpGet"]["port"];
            assert!(
                port.is_string() && ports.contains(&port),
                "{profile}: {probe} on {port}"
            );
        }
        // The kubelet kills at the grace period: the delay and the drain fit.
        let (delay, grace) = (
            seconds(env(c, "SLUICE_SHUTDOWN_DELAY")),
            seconds(env(c, "SLUICE_SHUTDOWN_GRACE")),
        );
        assert!(
            period > delay + grace,
            "{profile}: {period} s for {delay} + {grace}"
        );
    }
}

#[test]
fn every_rendered_pod_is_hardened() {
    for profile in PROFILES {
        let objs = objects(&render(profile));
        let deploy = one(&objs, "Deployment");
        pod_is_hardened(profile, &deploy["spec"]["template"]["spec"]);
    }
}

/// The Service, PDB, autoscaler, ServiceMonitor and spread select the pods;
/// ports are named and point where the container listens.
#[test]
fn every_selector_matches_the_pods() {
    for profile in PROFILES {
        let objs = objects(&render(profile));
        let deploy = one(&objs, "Deployment");
        let labels = &deploy["spec"]["template"]["metadata"]["labels"];
        assert!(selects(&deploy["spec"]["selector"]["matchLabels"], labels));
        let service = one(&objs, "Service");
        assert!(
            selects(&service["spec"]["selector"], labels),
            "{profile}: Service"
        );
        let pod = &deploy["spec"]["template"]["spec"];
        if let Some(pdb) = find(&objs, "PodDisruptionBudget") {
            assert!(
                selects(&pdb["spec"]["selector"]["matchLabels"], labels),
                "{profile}: PDB"
            );
        }
        if let Some(hpa) = find(&objs, "HorizontalPodAutoscaler") {
            assert_eq!(
                hpa["spec"]["scaleTargetRef"]["name"],
                deploy["metadata"]["name"]
            );
            assert!(
                deploy["spec"].get("replicas").is_none(),
                "{profile}: the HPA owns replicas"
            );
        }
        for t in pod["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                selects(&t["labelSelector"]["matchLabels"], labels),
                "{profile}: spread"
            );
        }
        ports_are_named_and_meet(profile, &objs, service, pod);
    }
}

/// Every Service port is named and targets a container port; the
/// ServiceMonitor selects the Service and scrapes one of its ports.
fn ports_are_named_and_meet(profile: &str, objs: &[Value], service: &Value, pod: &Value) {
    let names = |ports: &Value, field: &str| -> Vec<Value> {
        ports
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| p[field].clone())
            .collect()
    };
    let container = names(&pod["containers"][0]["ports"], "name");
    for p in service["spec"]["ports"].as_array().expect("ports") {
        assert!(container.contains(&p["targetPort"]), "{profile}: {p}");
        assert!(p["name"].is_string(), "{profile}: a port without a name");
    }
    if let Some(m) = find(objs, "ServiceMonitor") {
        assert!(selects(
            &m["spec"]["selector"]["matchLabels"],
            &service["metadata"]["labels"]
        ));
        let port = &m["spec"]["endpoints"][0]["port"];
        assert!(
            names(&service["spec"]["ports"], "name").contains(port),
            "{profile}: monitor port"
        );
    }
}

/// Spread only where there is more than one pod to spread; the gRPC port
/// tells Istio and Gateway API implementations it is HTTP/2.
#[test]
fn spread_and_protocol_follow_the_values() {
    let pod = |p: &str| one(&objects(&render(p)), "Deployment")["spec"]["template"]["spec"].clone();
    assert!(pod("memory").get("topologySpreadConstraints").is_none());
    let keys: Vec<Value> = pod("default")["topologySpreadConstraints"]
        .as_array()
        .expect("spread")
        .iter()
        .map(|t| t["topologyKey"].clone())
        .collect();
    assert_eq!(
        keys,
        ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    );
    let grpc = one(&objects(&render("default")), "Service")["spec"]["ports"][0].clone();
    assert_eq!(
        (grpc["name"].as_str(), grpc["appProtocol"].as_str()),
        (Some("grpc"), Some("kubernetes.io/h2c"))
    );
}

/// The PrometheusRule holds the shipped alerts and the dashboard ConfigMap
/// the shipped dashboard, for Grafana's sidecar.
#[test]
fn monitoring_carries_the_shipped_alerts_and_dashboard() {
    let objs = objects(&render("monitoring"));
    let rule = one(&objs, "PrometheusRule");
    let alerts: Value =
        serde_saphyr::from_str(&common::stack::repo_file("deploy/prometheus/alerts.yaml"))
            .expect("alerts");
    assert_eq!(rule["spec"], alerts);
    let dash = objs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard");
    let shipped: Value =
        serde_json::from_str(&common::stack::repo_file("deploy/grafana/sluice.json"))
            .expect("json");
    let rendered: Value =
        serde_json::from_str(dash["data"]["sluice.json"].as_str().expect("data")).expect("json");
    assert_eq!(rendered, shipped);
}
