//! `sluice check RULES --envoy FILE`: the shipped configs check clean, a
//! `/config_dump` taken from a real Envoy 1.40 running `envoy/envoy.yaml`
//! gives the same report as the YAML, and each hole is found in a broken
//! config, named by its file and route.

mod common;
#[path = "envoy_check/envoy_gateway.rs"]
mod envoy_gateway;
#[path = "envoy_check/versions.rs"]
mod versions;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::redis::free_port;
use common::stack::spawn_envoy;
use common::{config_dir, eventually, sluice_bin, workspace};
use serde_json::Value;

/// `sluice check` on `rules` with `--envoy` for each file: exit status,
/// stdout and stderr.
fn check(rules: &Path, files: &[&Path], json: bool) -> (i32, String, String) {
    let mut cmd = Command::new(sluice_bin());
    cmd.arg("check").arg(rules);
    for f in files {
        cmd.arg("--envoy").arg(f);
    }
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("sluice check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn shipped(path: &str) -> PathBuf {
    workspace().join(path)
}

#[test]
fn the_shipped_configs_check_clean_against_the_shipped_rules() {
    let rules = shipped("descriptors");
    let files = ["envoy/envoy.yaml", "envoy/rlqs.yaml", "envoy/usage.yaml"].map(shipped);
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (code, out, err) = check(&rules, &refs, false);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("0 errors, 0 warnings\n"), "{out}");
    // What a route sends and the rule it meets.
    assert!(
        out.contains("regex ^/api/auth/login/?$ (virtual host api), route rate_limits[0]\n    sends  tier=credentials, masked_remote_address=<the client address, masked>, path=/api/auth/login\n    meets  tier_credentials.masked_remote_address.path (credentials_per_ip_path)"),
        "{out}"
    );
    // The reservation's estimate is admitted only as a number.
    assert!(out.contains("[hits %REQ(x-max-tokens)%]"), "{out}");
    let (_, json, _) = check(&rules, &refs, true);
    let v: Value = serde_json::from_str(&json).expect("--json");
    assert_eq!(v["findings"], Value::Array(vec![]));
    assert_eq!(v["filters"][0]["domain"], "api");
}

/// The report of `files` as JSON, without the file names (a dump and its
/// YAML are different files).
fn routes(rules: &Path, file: &Path) -> Vec<Value> {
    let (code, out, err) = check(rules, &[file], true);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    v["filters"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["routes"].as_array().unwrap().clone())
        .collect()
}

#[test]
fn a_config_dump_from_a_real_envoy_gives_the_same_report_as_its_yaml() {
    let dir = tempfile::tempdir().unwrap();
    let admin = free_port();
    let config = dir.path().join("envoy.yaml");
    let rendered = Command::new("python3")
        .arg(workspace().join("envoy/stack.py"))
        .args(["render", "--config"])
        .arg(workspace().join("envoy/envoy.yaml"))
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--admin", &format!("127.0.0.1:{admin}")])
        .args(["--sluice", &format!("127.0.0.1:{}", free_port())])
        .args(["--upstream", &format!("127.0.0.1:{}", free_port())])
        .arg("--out")
        .arg(&config)
        .status()
        .expect("render");
    assert!(rendered.success());
    let mut envoy = spawn_envoy(&config, &dir.path().join("envoy.log"));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let url = format!("http://127.0.0.1:{admin}/config_dump");
    let mut dump = String::new();
    let up = eventually(Duration::from_secs(30), || match agent.get(&url).call() {
        Ok(r) => {
            dump = r.into_body().read_to_string().unwrap_or_default();
            dump.contains("ListenersConfigDump")
        }
        Err(_) => false,
    });
    let _ = envoy.kill();
    let _ = envoy.wait();
    assert!(up, "no /config_dump from Envoy");
    let dumped = dir.path().join("config_dump.json");
    std::fs::write(&dumped, &dump).unwrap();
    let rules = shipped("descriptors");
    let from_dump = routes(&rules, &dumped);
    let from_yaml = routes(&rules, &config);
    assert!(from_yaml.len() > 10, "{from_yaml:?}");
    assert_eq!(from_dump, from_yaml, "the dump and its YAML disagree");
}

/// A bootstrap with one listener: `filters` (YAML list items) and `routes`.
fn bootstrap(dir: &Path, name: &str, filters: &str, vhost_extra: &str, routes: &str) -> PathBuf {
    let text = format!(
        "static_resources:
  listeners:
  - name: edge
    address: {{socket_address: {{address: 127.0.0.1, port_value: 10000}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          '@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          http_filters:
{filters}
          - name: envoy.filters.http.router
            typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
          route_config:
            virtual_hosts:
            - name: web
              domains: ['*']
{vhost_extra}
              routes:
{routes}
"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const RATELIMIT: &str = "          - name: envoy.filters.http.ratelimit
            typed_config:
              '@type': type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: web
              timeout: 0.2s
              rate_limit_service: {grpc_service: {envoy_grpc: {cluster_name: sluice}}, transport_api_version: V3}";

const RULES: &str = "domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: tokens
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1000}
";

const GOOD_ROUTE: &str = "              - match: {prefix: /}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions: [{remote_address: {}}]
                  - actions: [{generic_key: {descriptor_key: tokens, descriptor_value: t}}, {request_headers: {header_name: x-user, descriptor_key: user}}]";

/// The findings of one broken config: (exit status, report).
fn findings(filters: &str, vhost_extra: &str, routes: &str) -> (i32, String) {
    let rules = config_dir(&[("web.yaml", RULES)]);
    let dir = tempfile::tempdir().unwrap();
    let file = bootstrap(dir.path(), "broken.yaml", filters, vhost_extra, routes);
    let (code, out, err) = check(rules.path(), &[&file], false);
    assert!(err.is_empty(), "{err}");
    (code, out)
}

#[test]
fn the_good_config_is_clean_and_each_hole_is_found_with_its_file_and_route() {
    let (code, out) = findings(RATELIMIT, "", GOOD_ROUTE);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("0 errors, 0 warnings\n"), "{out}");

    // A filter domain with no rules.
    let (code, out) = findings(
        &RATELIMIT.replace("domain: web", "domain: webb"),
        "",
        GOOD_ROUTE,
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("error: ")
            && out
                .contains("broken.yaml: edge: the ratelimit filter's domain \"webb\" has no rules"),
        "{out}"
    );
}

#[test]
fn a_descriptor_key_no_rule_has_is_an_error_and_its_rule_a_warning() {
    // A descriptor key no rule has (remote_addr against remote_address).
    let typo = GOOD_ROUTE.replace(
        "{remote_address: {}}",
        "{request_headers: {header_name: x-real-ip, descriptor_key: remote_addr}}",
    );
    let (code, out) = findings(RATELIMIT, "", &typo);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("error: ") && out.contains("broken.yaml: edge, route prefix / (virtual host web), route rate_limits[0]: this descriptor can never meet a rule (entry 1 (remote_addr) matches no rule)"), "{out}");
    // ... and the rule it was meant for is reached by nothing.
    assert!(
        out.contains("warning: (rules): domain web: rule remote_address is met by no route"),
        "{out}"
    );
}

#[test]
fn hits_addend_from_a_clients_header_needs_a_route_admitting_only_numbers() {
    // hits_addend from a client's header, no match admitting only numbers.
    let per_route = "              - match: {prefix: /}
                route: {cluster: upstream}
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    '@type': type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    rate_limits:
                    - actions: [{remote_address: {}}]
                    - actions: [{generic_key: {descriptor_key: tokens, descriptor_value: t}}, {request_headers: {header_name: x-user, descriptor_key: user}}]
                      hits_addend: {format: '%REQ(x-max-tokens)%'}";
    let (code, out) = findings(RATELIMIT, "", per_route);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("route prefix / (virtual host web), RateLimitPerRoute rate_limits[1]: hits_addend %REQ(x-max-tokens)% reads the header x-max-tokens"), "{out}");
    let fenced = per_route.replace(
        "              - match: {prefix: /}\n                route: {cluster: upstream}",
        "              - match: {prefix: /, headers: [{name: x-max-tokens, string_match: {safe_regex: {regex: '[0-9]{1,9}'}}}]}\n                route: {cluster: upstream}",
    );
    assert_eq!(
        findings(RATELIMIT, "", &fenced).0,
        0,
        "a route admitting only numbers is clean"
    );
}

#[test]
fn no_timeout_and_failing_closed_are_warnings() {
    // No timeout; failing closed with no rule's on_store_failure.
    let loose = RATELIMIT.replace(
        "              timeout: 0.2s\n",
        "              failure_mode_deny: true\n",
    );
    let (code, out) = findings(&loose, "", GOOD_ROUTE);
    assert_eq!(code, 0, "warnings only: {out}");
    assert!(
        out.contains("broken.yaml: edge: the ratelimit filter has no timeout"),
        "{out}"
    );
    assert!(
        out.contains("failure_mode_deny: true refuses every request"),
        "{out}"
    );
}

#[test]
fn cors_must_run_first_and_expose_retry_after() {
    // CORS: the filter after the ratelimit filter, Retry-After not exposed.
    let cors_filter = "          - name: envoy.filters.http.cors\n            typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors}";
    let policy = "              typed_per_filter_config:
                envoy.filters.http.cors:
                  '@type': type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy
                  allow_origin_string_match: [{exact: https://app.example.com}]
                  expose_headers: x-request-id";
    let (_, out) = findings(&format!("{RATELIMIT}\n{cors_filter}"), policy, GOOD_ROUTE);
    assert!(
        out.contains("the CORS filter does not run before the ratelimit filter"),
        "{out}"
    );
    assert!(
        out.contains("route virtual host web: the CORS policy does not expose Retry-After"),
        "{out}"
    );
    let (code, out) = findings(
        &format!("{cors_filter}\n{RATELIMIT}"),
        &policy.replace("x-request-id", "x-request-id, retry-after"),
        GOOD_ROUTE,
    );
    assert_eq!(
        (code, out.ends_with("0 errors, 0 warnings\n")),
        (0, true),
        "{out}"
    );
}

#[test]
fn what_the_check_does_not_know_is_said() {
    // Something this check does not know is said, never guessed at.
    let unknown = GOOD_ROUTE.replace(
        "[{remote_address: {}}]",
        "[{remote_address: {}}, {extension: {name: custom}}]",
    );
    let (_, out) = findings(RATELIMIT, "", &unknown);
    assert!(
        out.contains("route rate_limits[0]: not understood: action extension"),
        "{out}"
    );
}

#[test]
fn a_quota_bucket_keyed_on_a_header_nothing_verified_is_a_warning() {
    let quota = "          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              '@type': type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              rlqs_server: {envoy_grpc: {cluster_name: sluice}}
              domain: web
              bucket_matchers:
                matcher_list:
                  matchers:
                  - predicate:
                      single_predicate:
                        input: {name: p, typed_config: {'@type': type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: ':path'}}
                        value_match: {prefix: /}
                    on_match:
                      action:
                        name: bucket
                        typed_config:
                          '@type': type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                          bucket_id_builder:
                            bucket_id_builder:
                              tokens: {string_value: t}
                              user:
                                custom_value:
                                  name: user
                                  typed_config: {'@type': type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: x-user}";
    let route = "              - match: {prefix: /}\n                route: {cluster: upstream}";
    let (code, out) = findings(quota, "", route);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("the quota filter keys buckets on request header x-user and no authentication filter runs before it"), "{out}");
    let (code, out) = findings(&quota.replace("domain: web", "domain: nowhere"), "", route);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the quota filter's domain \"nowhere\" has no rules"),
        "{out}"
    );
}

#[test]
fn a_file_that_cannot_be_read_exits_2_with_its_name() {
    let rules = config_dir(&[("web.yaml", RULES)]);
    let missing = rules.path().join("no-such-envoy.yaml");
    let (code, _, err) = check(rules.path(), &[&missing], false);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no-such-envoy.yaml"), "{err}");
    let bad = rules.path().join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    let (code, _, err) = check(rules.path(), &[&bad], false);
    assert_eq!(code, 2, "{err}");
}

/// The shipped usage config with its after-the-response budget turned into
/// a token bucket: without `overdraft: true` the charge that does not fit
/// would take nothing, and the check says so; with it, the check is clean.
#[test]
fn a_bucket_charged_at_stream_done_needs_overdraft() {
    let shipped_rules = std::fs::read_to_string(shipped("descriptors/usage.yaml")).expect("rules");
    let plain = "rate_limit: {unit: minute, requests_per_unit: 1000}";
    assert!(shipped_rules.contains(plain));
    let usage = shipped("envoy/usage.yaml");
    for (bucket, warned) in [
        ("algorithm: token_bucket", true),
        ("algorithm: token_bucket, overdraft: true", false),
    ] {
        let rules = shipped_rules.replacen(
            plain,
            &format!("rate_limit: {{unit: minute, requests_per_unit: 1000, {bucket}}}"),
            1,
        );
        let dir = config_dir(&[("usage.yaml", &rules)]);
        let (code, out, err) = check(dir.path(), &[&usage], false);
        assert_eq!(code, 0, "{out}{err}");
        let said = out.contains("a token bucket without overdraft: true");
        assert_eq!(said, warned, "{bucket}: {out}");
        if warned {
            assert!(out.contains("tokens_after.api_key"), "{out}");
        }
    }
}
