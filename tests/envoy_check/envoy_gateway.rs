//! Envoy Gateway's generated rule files and Envoy config, checked.

use super::*;

fn envoy_gateway_golden(name: &str) -> String {
    std::fs::read_to_string(
        workspace()
            .join("tests/compat/envoy-gateway/ratelimit-config")
            .join(name),
    )
    .expect("golden")
}

/// Envoy Gateway's translator goldens (tests/compat/envoy-gateway, at a
/// named commit) pass `sluice check` as it writes them: a `name:` at the
/// top, `rate_limit: null` on inner levels, several configs in one file.
#[test]
fn envoy_gateways_generated_rule_files_pass_check() {
    let dir = workspace().join("tests/compat/envoy-gateway/ratelimit-config");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("goldens") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if name.ends_with(".routes.yaml") {
            continue;
        }
        let rules = config_dir(&[(&name, &envoy_gateway_golden(&name))]);
        let out = Command::new(sluice_bin())
            .arg("check")
            .arg(rules.path())
            .output()
            .expect("check");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {text}");
        // Every config of the file is loaded, one domain each.
        let docs = envoy_gateway_golden(&name)
            .lines()
            .filter(|l| l.starts_with("domain: "))
            .count();
        assert_eq!(
            text.lines().filter(|l| l.contains(" rules")).count(),
            docs,
            "{name}: {text}"
        );
        checked += 1;
    }
    assert_eq!(checked, 26);
}

/// What Envoy Gateway meant: `value: ""` is any value, each value its own
/// counter (its "distinct" limits); `rate_limit: null` sets no limit on the
/// levels above. Before, the empty value matched only the empty string, so
/// a distinct limit of 5 a second let every user through.
#[tokio::test]
async fn envoy_gateways_distinct_limits_count_each_value() {
    let s = common::Sluice::start(
        &[("eg.yaml", &envoy_gateway_golden("distinct-match.yaml"))],
        &[],
    );
    let mut c = s.client().await;
    let user = |v: &str| {
        vec![
            ("first-route".to_owned(), "first-route".to_owned()),
            ("rule-0-match-0".to_owned(), v.to_owned()),
        ]
    };
    for who in ["bob", "alice"] {
        let entries = user(who);
        let refs: Vec<(&str, &str)> = entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        // Six requests inside one second's window: start early in one (a
        // wall-clock condition, nothing to poll but the clock).
        while std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_millis()
            > 200
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut codes = Vec::new();
        for _ in 0..6 {
            codes.push(
                common::ask(&mut c, "first-listener", &refs)
                    .await
                    .overall_code,
            );
        }
        assert_eq!(codes, [1, 1, 1, 1, 1, 2], "{who}: 5 a second each");
    }
}

fn eg(path: &str) -> PathBuf {
    workspace().join("tests/compat/envoy-gateway").join(path)
}

/// The Envoy side Envoy Gateway generates (its xds-ir goldens: listeners and
/// routes as lists of resources, camelCase, one ratelimit filter per shared
/// policy named `envoy.filters.http.ratelimit/<domain>`, a domain in every
/// `RateLimitPerRoute`, `remoteAddressMatch` actions) is read whole: paired
/// with the rule file it generates for it, it checks clean, and a hole put
/// into the rules is found with its route.
#[test]
fn envoy_gateways_generated_envoy_config_checks_against_its_rules() {
    let listeners = eg("xds-ir/ratelimit-sourceip-invert.listeners.yaml");
    let routes = eg("xds-ir/ratelimit-sourceip-invert.routes.yaml");
    let rules = envoy_gateway_golden("ratelimit-sourceip-invert.yaml");
    let dir = config_dir(&[("eg.yaml", &rules)]);
    let (code, out, err) = check(dir.path(), &[&listeners, &routes], false);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 errors"), "{out}");
    assert!(
        out.contains("sends  first-route=first-route, masked_remote_address=invert:192.168.0.0/24\n    meets  first-route_first-route.masked_remote_address_invert:192.168.0.0/24"),
        "{out}"
    );
    assert!(!out.contains("not understood"), "{out}");
    // A hole: the rule's value no longer what the route sends.
    let broken = rules.replace("value: invert:192.168.0.0/24", "value: invert:10.0.0.0/8");
    let dir = config_dir(&[("eg.yaml", &broken)]);
    let (code, out, _) = check(dir.path(), &[&listeners, &routes], false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("route first-route") && out.contains("can never meet a rule"),
        "{out}"
    );

    // Every shared policy's filter is read, each entry under the domain its
    // RateLimitPerRoute names: with no rules, each domain is named.
    let none = config_dir(&[("none.yaml", "domain: none\ndescriptors: []\n")]);
    let shared = [
        eg("xds-ir/ratelimit-global-shared.listeners.yaml"),
        eg("xds-ir/ratelimit-global-shared.routes.yaml"),
    ];
    let refs: Vec<&Path> = shared.iter().map(PathBuf::as_path).collect();
    let (code, out, _) = check(none.path(), &refs, false);
    assert_eq!(code, 1, "{out}");
    for domain in [
        "first-listener",
        "test-namespace/test-policy-1",
        "test-namespace/test-policy-2",
        "test-namespace/test-policy-4",
    ] {
        assert!(
            out.contains(&format!("domain {domain:?} has no rules")),
            "{domain}: {out}"
        );
    }
    assert!(
        out.contains("(domain test-namespace/test-policy-1 has no rules)"),
        "{out}"
    );
}

/// `check --xds-overlay`: Envoy Gateway's generated rules read as pushed,
/// with an operator's shapes on them; an entry that meets no rule is a
/// warning, and an overlay that would change the pushed number fails.
#[test]
fn an_overlay_over_envoy_gateways_rules_is_checked_and_shown() {
    let rules = config_dir(&[(
        "distinct.yaml",
        &envoy_gateway_golden("distinct-match.yaml"),
    )]);
    let shapes = "domain: first-listener\ndescriptors:\n  - key: first-route\n    value: first-route\n    descriptors:\n      - key: rule-0-match-0\n        rate_limit: {algorithm: sliding_window, window: 10s, on_store_failure: deny}\n  - key: no-such-route\n    rate_limit: {algorithm: sliding_window}\n";
    let overlay = config_dir(&[("shapes.yaml", shapes)]);
    let run = |overlay: &Path| {
        let out = Command::new(sluice_bin())
            .args(["check", "--rules", "--xds-overlay"])
            .arg(overlay)
            .arg(rules.path())
            .output()
            .expect("check");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = run(overlay.path());
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("first-route_first-route.rule-0-match-0: window=10s requests_per_unit=5 algorithm=sliding_window"),
        "{text}"
    );
    assert!(text.contains("on_store_failure=deny"), "{text}");
    assert!(
        text.contains("warning: --xds-overlay:") && text.contains("(no-such-route) meets no rule"),
        "{text}"
    );
    let bad = config_dir(&[(
        "shapes.yaml",
        &shapes.replace(
            "algorithm: sliding_window, window: 10s",
            "requests_per_unit: 50",
        ),
    )]);
    let (code, text) = run(bad.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("requests_per_unit comes from the control plane"),
        "{text}"
    );
}

fn read_yaml(p: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(p).expect("golden")).expect("yaml")
}

/// Each ratelimit filter of Envoy Gateway's `listeners`: (name, domain).
fn ratelimit_filters(listeners: &Path) -> Vec<(String, String)> {
    let mut filters = Vec::new();
    for l in read_yaml(listeners).as_array().into_iter().flatten() {
        let chains = l.pointer("/defaultFilterChain").into_iter().chain(
            l.get("filterChains")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        );
        for chain in chains {
            for f in chain
                .get("filters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let http = f
                    .pointer("/typedConfig/httpFilters")
                    .and_then(Value::as_array);
                for h in http.into_iter().flatten() {
                    let name = h.get("name").and_then(Value::as_str).unwrap_or_default();
                    if let (true, Some(d)) = (
                        name.starts_with("envoy.filters.http.ratelimit"),
                        h.pointer("/typedConfig/domain").and_then(Value::as_str),
                    ) {
                        filters.push((name.to_owned(), d.to_owned()));
                    }
                }
            }
        }
    }
    filters
}

/// The domain Envoy Gateway sends each route's entries to, read from its
/// goldens: per ratelimit filter, its domain, unless the route's
/// `RateLimitPerRoute` under that filter's name names its own.
/// (filter domain, route name) -> domain.
fn sent_domains(listeners: &Path, routes: &Path) -> Vec<((String, String), String)> {
    let filters = ratelimit_filters(listeners);
    let mut out = Vec::new();
    for rc in read_yaml(routes).as_array().into_iter().flatten() {
        for vh in rc
            .get("virtualHosts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for r in vh
                .get("routes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let route = r.get("name").and_then(Value::as_str).unwrap_or_default();
                for (name, domain) in &filters {
                    let per_route = r.get("typedPerFilterConfig").and_then(|t| t.get(name));
                    let Some(per_route) = per_route else { continue };
                    let to = per_route.get("domain").and_then(Value::as_str);
                    out.push((
                        (domain.clone(), route.to_owned()),
                        to.unwrap_or(domain).to_owned(),
                    ));
                }
            }
        }
    }
    out
}

/// Every route of every xds-ir golden is checked under the domain Envoy
/// Gateway sends it to, merged hostnames included (one filter of domain
/// http-app1 whose app2 route's RateLimitPerRoute names http-app2): the
/// report says each route's domain, and the text names it where it is not
/// the filter's.
#[test]
fn every_envoy_gateway_route_is_placed_under_the_domain_it_is_sent_to() {
    let none = config_dir(&[("none.yaml", "domain: none\ndescriptors: []\n")]);
    let mut placed = 0;
    for entry in std::fs::read_dir(eg("xds-ir")).expect("xds-ir") {
        let listeners = entry.expect("entry").path();
        let Some(stem) = listeners
            .to_str()
            .and_then(|p| p.strip_suffix(".listeners.yaml"))
        else {
            continue;
        };
        let routes = PathBuf::from(format!("{stem}.routes.yaml"));
        let expected = sent_domains(&listeners, &routes);
        let (_, out, err) = check(none.path(), &[&listeners, &routes], true);
        let report: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        for f in report["filters"].as_array().into_iter().flatten() {
            let filter = f["domain"].as_str().unwrap_or_default();
            for r in f["routes"].as_array().into_iter().flatten() {
                if r["place"] != "RateLimitPerRoute" {
                    continue;
                }
                let route = r["route"].as_str().unwrap_or_default();
                let want = expected
                    .iter()
                    .find(|(k, _)| k.0 == filter && k.1 == route)
                    .map(|(_, d)| d.as_str());
                assert_eq!(
                    r["domain"].as_str(),
                    want,
                    "{stem}: route {route} under the filter of {filter}"
                );
                placed += 1;
            }
        }
    }
    assert!(placed >= 20, "{placed} routes placed");
    let merged = eg("xds-ir/ratelimit-merge-hostnames");
    let (l, r) = (
        PathBuf::from(format!("{}.listeners.yaml", merged.display())),
        PathBuf::from(format!("{}.routes.yaml", merged.display())),
    );
    let (_, out, _) = check(none.path(), &[&l, &r], false);
    assert!(
        out.contains("app2_gateway_envoyproxy_io), RateLimitPerRoute rate_limits[0], domain \"envoy-gateway/gateway-2/http-app2\""),
        "{out}"
    );
}
