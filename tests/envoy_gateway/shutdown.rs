//! Under Envoy Gateway's environment, `SLUICE_SHUTDOWN_DELAY` added to the
//! container's env (as the book's "Under Envoy Gateway" advises) holds the
//! GOAWAY: on SIGTERM `/healthcheck` turns 500 at once, the process keeps
//! serving through the delay, then exits 0.

use super::*;

#[test]
fn a_shutdown_delay_in_the_containers_env_holds_the_goaway() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = secret(dir.path());
    let redis = RedisServer::start();
    let ports = Ports {
        http: free_port(),
        grpc: free_port(),
        debug: free_port(),
        prometheus: free_port(),
    };
    // No xDS server answers: the reference starts without rules, as here.
    let xds: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut env = envoy_gateway_env(&certs.display().to_string(), xds, redis.port, &ports);
    env.push(("SLUICE_SHUTDOWN_DELAY".into(), "3s".into()));
    let mut sluice = start_binary(dir.path(), &env);
    let ready = || get(ports.http, "/healthcheck") == (200, "OK".into());
    assert!(
        eventually(Duration::from_secs(30), ready),
        "{}",
        sluice.log()
    );
    let stopped = Instant::now();
    assert!(common::send_signal(sluice.child.id(), "TERM"));
    let unready = || get(ports.http, "/healthcheck").0 == 500;
    assert!(
        eventually(Duration::from_secs(3), unready),
        "{}",
        sluice.log()
    );
    let exited = eventually(Duration::from_secs(30), || {
        sluice.child.try_wait().ok().flatten().is_some()
    });
    assert!(exited, "{}", sluice.log());
    // The delay is a floor sluice keeps, not a timing the machine allows.
    assert!(
        stopped.elapsed() >= Duration::from_secs(3),
        "left before the delay"
    );
    assert!(sluice.child.wait().expect("status").success());
    assert!(sluice.log().contains("delay_seconds=3"), "{}", sluice.log());
}
