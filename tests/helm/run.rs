//! The rendered container run for real: its args and env as rendered, its
//! ConfigMaps and Secrets written where they are mounted, the real binary
//! on loopback in place of the pod's addresses; the probes' paths answer
//! on the ports they name, a decision is served, and SIGTERM turns it
//! not-ready at once while it still answers, then it exits 0 within the
//! grace period the chart gives the pod.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::*;
use common::redis::{RedisServer, free_port};
use common::{eventually, send_signal, sluice_bin};

/// A rendered pod's container, running.
struct Running {
    child: Child,
    /// Container port name to the loopback port it listens on here.
    ports: HashMap<String, u16>,
    container: Value,
    grace_period: u64,
    /// Where its mounts and log are; removed when it is dropped.
    root: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rendered Deployment's container of `objs`, started with `secrets`
/// ((Secret, key) to value) standing in for the cluster's.
fn launch(objs: &[Value], secrets: &HashMap<(&str, &str), String>) -> Running {
    let deploy = one(objs, "Deployment");
    let pod = &deploy["spec"]["template"]["spec"];
    let c = pod["containers"][0].clone();
    let root = tempfile::tempdir().expect("tempdir");
    let mounts: Vec<String> = mount_all(objs, pod, &c, root.path(), secrets);
    let mut ports = HashMap::new();
    let mut rewrite: Vec<(String, String)> = Vec::new();
    for p in c["ports"].as_array().expect("ports") {
        let (name, number) = (p["name"].as_str().expect("name"), &p["containerPort"]);
        let here = free_port();
        ports.insert(name.to_owned(), here);
        rewrite.push((format!("0.0.0.0:{number}"), format!("127.0.0.1:{here}")));
    }
    let mut cmd = std::process::Command::new(sluice_bin());
    cmd.env_clear().stdin(Stdio::null()).stdout(Stdio::null());
    cmd.stderr(std::fs::File::create(root.path().join("log")).expect("log"));
    for a in c["args"].as_array().expect("args") {
        cmd.arg(a.as_str().expect("an arg"));
    }
    for e in c["env"].as_array().expect("env") {
        let value = match (&e["value"], &e["valueFrom"]["secretKeyRef"]) {
            (Value::String(v), _) => v.clone(),
            (_, r) if r.is_object() => secret(secrets, &r["name"], &r["key"]),
            other => panic!("env {e}: {other:?}"),
        };
        let mut value = rewrite
            .iter()
            .fold(value, |v, (from, to)| v.replace(from, to));
        if mounts.iter().any(|m| value.starts_with(m.as_str())) {
            value = format!("{}{value}", root.path().display());
        }
        cmd.env(e["name"].as_str().expect("name"), value);
    }
    Running {
        child: cmd.spawn().expect("sluice"),
        ports,
        container: c,
        grace_period: pod["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("grace"),
        root,
    }
}

fn secret(secrets: &HashMap<(&str, &str), String>, name: &Value, key: &Value) -> String {
    let (name, key) = (name.as_str().expect("name"), key.as_str().expect("key"));
    secrets
        .get(&(name, key))
        .unwrap_or_else(|| panic!("no Secret {name}/{key} here"))
        .clone()
}

/// Writes each mounted ConfigMap (rendered) and Secret (from `secrets`)
/// under `root` at its mount path; the mount paths.
fn mount_all(
    objs: &[Value],
    pod: &Value,
    c: &Value,
    root: &Path,
    secrets: &HashMap<(&str, &str), String>,
) -> Vec<String> {
    let mut paths = Vec::new();
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let path = m["mountPath"].as_str().expect("mountPath");
        let dir = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let vol = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == m["name"])
            .expect("the mounted volume");
        let files: Vec<(String, String)> = if let Some(name) = vol["configMap"]["name"].as_str() {
            let cm = objs
                .iter()
                .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == name)
                .expect("the ConfigMap is rendered");
            cm["data"]
                .as_object()
                .expect("data")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().expect("text").to_owned()))
                .collect()
        } else if let Some(name) = vol["secret"]["secretName"].as_str() {
            secrets
                .iter()
                .filter(|((s, _), _)| *s == name)
                .map(|((_, k), v)| ((*k).to_owned(), v.clone()))
                .collect()
        } else {
            panic!("volume {vol} is not run here")
        };
        for (k, v) in files {
            std::fs::write(dir.join(k), v).expect("write");
        }
        paths.push(path.to_owned());
    }
    paths
}

impl Running {
    /// The status of the probe `probe` (e.g. readinessProbe), if it answers.
    fn probe(&self, probe: &str) -> Option<u16> {
        let get = &self.container[probe]["httpGet"];
        let port = self.ports[get["port"].as_str().expect("a named port")];
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        let addr = format!("127.0.0.1:{port}").parse().expect("addr");
        Some(common::http(addr, "GET", get["path"].as_str().expect("path"), "").0)
    }

    async fn decide(&self) -> Result<i32, tonic::Status> {
        let url = format!("http://127.0.0.1:{}", self.ports["grpc"]);
        let mut c = common::Client::connect(url)
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let req = common::request("api", vec![common::descriptor(&[("tier", "internal")])]);
        Ok(c.should_rate_limit(req).await?.into_inner().overall_code)
    }
}

/// Up by its probes, a decision served, then SIGTERM: not ready at once,
/// still answering, gone with exit 0 within the pod's grace period.
async fn runs_and_drains(profile: &str, args: &[&str], secrets: &HashMap<(&str, &str), String>) {
    let objs = objects(&template(profile, args).expect("render"));
    let mut pod = launch(&objs, secrets);
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let up = eventually(Duration::from_secs(30), || pod.probe(probe) == Some(200));
        let log = std::fs::read_to_string(pod.root.path().join("log")).unwrap_or_default();
        assert!(up, "{profile}: {probe} never answered 200\n{log}");
    }
    assert_eq!(pod.decide().await.expect("a decision"), 1, "{profile}: OK");
    let stopped = Instant::now();
    assert!(send_signal(pod.child.id(), "TERM"));
    let not_ready = eventually(Duration::from_secs(5), || {
        pod.probe("readinessProbe") == Some(503)
    });
    assert!(not_ready, "{profile}: still ready after SIGTERM");
    assert_eq!(
        pod.decide()
            .await
            .expect("answered while leaving the endpoints"),
        1
    );
    let within = Duration::from_secs(pod.grace_period);
    let exited = eventually(within, || pod.child.try_wait().ok().flatten().is_some());
    assert!(
        exited,
        "{profile}: not gone within the grace period ({within:?})"
    );
    let status = pod.child.wait().expect("status");
    assert!(status.success(), "{profile}: {status:?}");
    eprintln!("{profile}: exited {:?} after SIGTERM", stopped.elapsed());
}

#[tokio::test]
async fn the_default_release_runs_on_redis_and_drains() {
    let redis = RedisServer::start();
    let secrets = HashMap::from([(("sluice-redis", "url"), redis.url())]);
    runs_and_drains("default", &[], &secrets).await;
}

#[tokio::test]
async fn one_replica_on_memory_runs_and_drains() {
    runs_and_drains("memory", &[], &HashMap::new()).await;
}

#[tokio::test]
async fn the_ha_release_runs_with_its_admin_token_and_drains() {
    let redis = RedisServer::start();
    let secrets = HashMap::from([
        (("sluice-redis", "url"), redis.url()),
        (("sluice-admin", "token"), "s3cret-token".to_owned()),
    ]);
    runs_and_drains("ha-redis", &[], &secrets).await;
}

#[tokio::test]
async fn the_memcache_release_runs_and_drains() {
    let memcached = common::memcache::Memcached::start();
    let servers = format!("store.memcacheServers={}", memcached.addr());
    runs_and_drains("memcache", &["--set", &servers], &HashMap::new()).await;
}
