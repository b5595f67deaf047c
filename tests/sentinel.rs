//! Redis Sentinel with real processes: sluice finds the master through the
//! sentinel, rides out the master's death on the failure policy, counts
//! on the promoted replica once the sentinel has failed over, and leaves a
//! node that still answers as a master once the sentinels name another.

mod common;

use std::time::Duration;

use common::redis::{RedisSentinel, RedisServer};
use common::*;

const RULES: &str = "
domain: shop
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1000}
";

fn count(r: &RedisServer) -> Option<u64> {
    let key = r.counter_keys().into_iter().next()?;
    r.cli(&["get", &key]).trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_and_counting_resumes_on_the_new_master() {
    let mut master = RedisServer::start();
    let replica = replica_of(&master);
    let sentinel = RedisSentinel::start("mymaster", master.port);
    let spec = format!("mymaster@127.0.0.1:{}", sentinel.port);
    let s = Sluice::start(
        &[("shop.yaml", RULES)],
        &["--redis-sentinel", &spec, "--redis-timeout", "200ms"],
    );
    assert!(eventually(Duration::from_secs(10), || s.status() == "ready"));
    let (_, ready) = s.get("/readyz");
    assert!(ready.contains("redis-sentinel"), "{ready}");
    let mut c = s.client().await;
    for _ in 0..3 {
        assert_eq!(
            ask(&mut c, "shop", &[("ip", "1.2.3.4")]).await.overall_code,
            OK
        );
    }
    assert_eq!(count(&master), Some(3), "counted on the master");

    master.kill();
    // Every request is still answered, by the failure policy, until the
    // sentinel promotes the replica and sluice proves it.
    let promoted = eventually(Duration::from_secs(30), || {
        sentinel.master_port("mymaster") == Some(replica.port)
    });
    assert!(promoted, "the sentinel never failed over");
    // Requests keep coming, as they would: the first ones find the old master
    // gone and open the breaker; the probe then asks the sentinel again.
    let before = count(&replica).unwrap_or(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut answered = 0;
    loop {
        let r = ask(&mut c, "shop", &[("ip", "1.2.3.4")]).await;
        assert_eq!(r.overall_code, OK);
        answered += 1;
        if s.status() == "ready" && count(&replica).is_some_and(|n| n > before) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sluice never followed the failover: {}",
            s.get("/readyz").1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    the_new_master_counts(&mut c, &replica).await;

    eprintln!("{answered} requests answered while sluice followed the failover");
}

/// Counting goes on at the new master: a request may be answered from
/// allowance it already counted (a lease), so ask until it counts more.
async fn the_new_master_counts(c: &mut Client, replica: &RedisServer) {
    // Counting goes on there: a request may be answered from allowance the
    // new master already counted (a lease), so ask until it counts more.
    let now = count(replica).unwrap_or(0);
    let mut more = 0;
    while count(replica).is_none_or(|n| n <= now) {
        assert_eq!(ask(c, "shop", &[("ip", "1.2.3.4")]).await.overall_code, OK);
        more += 1;
        assert!(more <= 1000 / 8 + 1, "the new master stopped counting");
    }
}

/// A Redis replicating `master`, its link up.
fn replica_of(master: &RedisServer) -> RedisServer {
    let replica = RedisServer::start();
    replica.cli(&["replicaof", "127.0.0.1", &master.port.to_string()]);
    assert!(eventually(Duration::from_secs(10), || replica
        .cli(&["info", "replication"])
        .contains("master_link_status:up")));
    replica
}

/// A node that still answers as a master after the sentinels named another
/// (a killed master restarted empty before the sentinel demotes it) must not
/// keep an instance counting apart from the fleet: sluice asks the sentinels
/// every second while connected and follows the master they name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_the_sentinels_no_longer_name_is_left() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let sentinel = RedisSentinel::start("mymaster", old.port);
    let spec = format!("mymaster@127.0.0.1:{}", sentinel.port);
    let s = Sluice::start(
        &[("shop.yaml", RULES)],
        &["--redis-sentinel", &spec, "--redis-timeout", "200ms"],
    );
    assert!(eventually(Duration::from_secs(10), || s.status() == "ready"));
    let mut c = s.client().await;
    for _ in 0..3 {
        assert_eq!(
            ask(&mut c, "shop", &[("ip", "1.2.3.4")]).await.overall_code,
            OK
        );
    }
    assert_eq!(count(&old), Some(3), "counted on the first master");
    // The sentinels now name another master; the old node lives on, a
    // master still, and would take every increment sent to it.
    sentinel.cli(&["sentinel", "remove", "mymaster"]);
    let port = new.port.to_string();
    sentinel.cli(&["sentinel", "monitor", "mymaster", "127.0.0.1", &port, "1"]);
    assert_eq!(sentinel.master_port("mymaster"), Some(new.port));
    counting_moves(&mut c, &old, &new, 0).await;
}

/// Asks until `new` counts past `from` (the failure policy answering the
/// gap), within 15 s; `old` stayed a master all along, and would have
/// taken every increment sent to it.
async fn counting_moves(c: &mut Client, old: &RedisServer, new: &RedisServer, from: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while count(new).is_none_or(|n| n <= from) {
        let r = ask(c, "shop", &[("ip", "1.2.3.4")]).await;
        assert_eq!(r.overall_code, OK, "the failure policy answers the gap");
        assert!(
            std::time::Instant::now() < deadline,
            "still counting on the node the sentinels no longer name: {:?} there",
            count(old)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        old.cli(&["role"]).starts_with("master"),
        "the old node stayed a master: {}",
        old.cli(&["role"])
    );
}

/// A failover the sentinels announce (`+switch-master`) is followed when
/// it is announced, not at the next recheck (here ten minutes away): the
/// old master cannot be demoted (its REPLICAOF denied to the sentinel, as a
/// node restarted empty is not demoted yet) and would take every increment,
/// so only the announcement can move sluice off it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_failover_is_followed_without_waiting_for_the_recheck() {
    let old = RedisServer::start();
    let new = replica_of(&old);
    old.cli(&["acl", "setuser", "default", "-replicaof", "-slaveof"]);
    let sentinel = RedisSentinel::start("mymaster", old.port);
    // The sentinel has found the replica it will promote.
    assert!(eventually(Duration::from_secs(15), || sentinel
        .cli(&["sentinel", "replicas", "mymaster"])
        .contains(&new.port.to_string())));
    let spec = format!("mymaster@127.0.0.1:{}", sentinel.port);
    let s = Sluice::start(
        &[("shop.yaml", RULES)],
        &[
            "--redis-sentinel",
            &spec,
            "--redis-timeout",
            "200ms",
            "--redis-sentinel-recheck",
            "600s",
        ],
    );
    assert!(eventually(Duration::from_secs(10), || s.status() == "ready"));
    let mut c = s.client().await;
    assert_eq!(
        ask(&mut c, "shop", &[("ip", "1.2.3.4")]).await.overall_code,
        OK
    );
    assert_eq!(count(&old), Some(1), "counted on the first master");
    // Asked until the sentinel starts it: it refuses one (NOGOODSLAVE)
    // until it has seen the replica in sync, which under load comes after
    // the replica is listed.
    let mut refused = Vec::new();
    let started = eventually(Duration::from_secs(30), || {
        let said = sentinel.cli(&["sentinel", "failover", "mymaster"]);
        let ok = said.starts_with("OK") || sentinel.master_port("mymaster") == Some(new.port);
        if !ok {
            refused.push(said);
        }
        ok
    });
    assert!(
        started,
        "the sentinel never started a failover: {refused:?}"
    );
    assert!(
        eventually(Duration::from_secs(30), || sentinel.master_port("mymaster")
            == Some(new.port)),
        "the sentinel never failed over"
    );
    let at_switch = count(&new).unwrap_or(0);
    counting_moves(&mut c, &old, &new, at_switch).await;
}
