//! The advisor on the fleet users run: two instances on one Redis with
//! leased allowance on (the default). A hot key is answered from chunks of
//! its limit leased from the store; the usage levels are read from the
//! store's count as it moves (a chunk when taken, positions never spent
//! given back once the window ends), so a window that has ended reads
//! exactly as it would with one store call per request.

use super::*;
use common::stack::room_in_window;

/// Seconds since the epoch, on the wall clock both instances read.
fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Key i (1..=60) sends i requests on `rule`, three heavy keys 300 each,
/// each key's requests over `clients` in turn; keys named after `tag`.
async fn population_tagged(clients: &mut [Client], rule: &str, tag: &str) -> Vec<u64> {
    let mut totals: Vec<u64> = (1..=60).collect();
    totals.extend([300, 300, 300]);
    let sends = totals.iter().enumerate().map(|(key, n)| {
        let mut clients = clients.to_vec();
        let (rule, n, value) = (rule.to_owned(), *n, format!("{tag}-{key}"));
        tokio::spawn(async move {
            let count = clients.len();
            for i in 0..n {
                let c = &mut clients[(key + i as usize) % count];
                ask(c, "auth", &[(rule.as_str(), value.as_str())]).await;
            }
        })
    });
    for s in futures_util::future::join_all(sends).await {
        s.expect("sender");
    }
    totals
}

/// The fleet's figures for `limit` on `rule` in the window starting at
/// `start`: keys, keys refused, requests refused.
fn in_window(instances: &[&Sluice], rule: &str, limit: u64, start: u64) -> (i64, i64, i64) {
    let mut sum = (0, 0, 0);
    for s in instances {
        let v = usage(s, &format!("domain=auth&rule={rule}&limit={limit}"));
        for w in v["windows"].as_array().into_iter().flatten() {
            if w["start"].as_u64() == Some(start) {
                sum.0 += w["keys"].as_i64().unwrap_or(0);
                sum.1 += w["keys_refused"].as_i64().unwrap_or(0);
                sum.2 += w["requests_refused"].as_i64().unwrap_or(0);
            }
        }
    }
    sum
}

/// What the advisor reads for `limit` when each request is counted by one
/// store call: each key at the levels its total reached (above 32 the
/// levels are 5% apart, so requests refused are read off them).
fn one_call_per_request(totals: &[u64], limit: u64) -> (i64, i64) {
    use sluice_server::usage::{levels, query};
    let keys: Vec<i64> = (0..levels::len())
        .map(|i| totals.iter().filter(|t| levels::index(**t) > i).count() as i64)
        .collect();
    (
        query::keys_refused(&keys, limit),
        query::requests_refused(&keys, limit),
    )
}

/// With leases on, a window that has ended reads what one store call per
/// request would: below 32 every level is exact (keys refused); requests
/// refused and the levels above as without leases.
/// Before, the levels were read from each request's leased position, and
/// positions leased and never spent left holes: 24 to 29 keys of 32 read
/// as past 30.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leases_on_an_ended_window_reads_exactly_what_was_sent() {
    let redis = RedisServer::start();
    let (a, b) = (on_redis(&redis), on_redis(&redis));
    an_ended_window_is_exact(&[&a, &b], &[&redis]).await;
}

/// The same on a Redis Cluster, three instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leases_on_a_cluster_an_ended_window_reads_exactly_what_was_sent() {
    let cluster = common::redis::RedisCluster::start();
    let seeds = cluster.seeds();
    let args = ["--redis-cluster", seeds.as_str(), "--redis-timeout", "2s"];
    let fleet: Vec<Sluice> = (0..3).map(|_| start(&args)).collect();
    let refs: Vec<&Sluice> = fleet.iter().collect();
    let nodes: Vec<&RedisServer> = cluster.nodes.iter().collect();
    an_ended_window_is_exact(&refs, &nodes).await;
}

/// Each key's count in the store for the window starting at `start`: what
/// the advisor reads without leases. (What the clients sent, but for a
/// request shed after the store counted it and asked again: on a loaded
/// machine a key of 300 was counted 301.)
fn store_totals(nodes: &[&RedisServer], start: u64) -> Vec<u64> {
    let window = format!(":{start}:");
    nodes
        .iter()
        .flat_map(|n| n.counts())
        .filter(|(k, _)| k.starts_with("auth:") && k.contains(&window))
        .map(|(_, n)| n)
        .collect()
}

/// What a failure needs to be read: each instance's figures at limit 1,
/// its store errors and sheds, and the store's counts.
fn diagnosis(instances: &[&Sluice], counted: &[u64], start: u64) -> String {
    let mut out = String::new();
    for s in instances {
        let m = s.get("/metrics").1;
        let errors = common::metric_sum(&m, "sluice_store_errors_total");
        out += &format!(
            "instance {}: {:?}, store errors {errors}\n",
            s.grpc,
            in_window(&[s], "big", 1, start)
        );
    }
    let mut sorted = counted.to_vec();
    sorted.sort_unstable();
    out + &format!("store counts: {sorted:?}")
}

/// Keys, keys refused and requests refused for one limit.
type Figures = (i64, i64, i64);

/// The fleet's figures `got` against one store call per request's `want`:
/// keys exact (levels up to 32 are every count), requests refused within
/// the book's stated error, 2.5% (a Cluster run in ten read one request
/// over, a key's level crossed once more than its count in the store: not
/// yet explained, the book says so); each over by at most the `lost`
/// positions whose give-back went unanswered.
fn within(got: Figures, want: Figures, lost: i64) -> bool {
    let keys = [got.0 - want.0, got.1 - want.1];
    keys.iter().all(|d| (0..=lost).contains(d))
        && (got.2 - want.2).abs() <= lost + (want.2 / 40).max(1)
}

/// The sum of a counter over the fleet.
fn fleet_sum(instances: &[&Sluice], series: &str) -> f64 {
    instances
        .iter()
        .filter_map(|s| metric(&s.get("/metrics").1, series))
        .sum()
}

/// Positions given back whose answer never came (the store slower than
/// its timeout at the window's end): the figures may read over by them, as
/// the book says; with none lost they are exact.
fn unsettled(instances: &[&Sluice]) -> i64 {
    fleet_sum(instances, "sluice_store_allowance_unsettled_total") as i64
}

/// A known population through `instances` counting in `nodes`, in one
/// window of a minute; once it has ended, the fleet's figures for it
/// against one store call per request.
async fn an_ended_window_is_exact(instances: &[&Sluice], nodes: &[&RedisServer]) {
    let mut clients = Vec::new();
    for s in instances {
        clients.push(s.client().await);
    }
    for attempt in 0..3 {
        room_in_window(60, 45);
        let minute = now_s() / 60;
        let totals = population_tagged(&mut clients, "big", &format!("try{attempt}")).await;
        if now_s() / 60 != minute {
            // The sends spilled into the next window: try again there.
            continue;
        }
        let served = fleet_sum(instances, "sluice_store_allowance_answers_total");
        assert!(served > 500.0, "leases answered {served} requests");
        let start = minute * 60;
        let exact = |totals: &[u64], l: u64| {
            let (keys, requests) = one_call_per_request(totals, l);
            (totals.len() as i64, keys, requests)
        };
        // The counts as last read while the window's keys lived (they
        // expire a few seconds after it ends, the give-backs in by then).
        let counted = std::cell::RefCell::new(Vec::new());
        let figures = || {
            let now = store_totals(nodes, start);
            // (A reading as they expire lacks some.)
            if !now.is_empty() && now.len() >= counted.borrow().len() {
                *counted.borrow_mut() = now;
            }
            let counted = counted.borrow();
            [1, 5, 10, 25, 30, 31]
                .map(|l| (in_window(instances, "big", l, start), exact(&counted, l)))
        };
        let unsettled = || unsettled(instances);
        let within = |(got, want): &(Figures, Figures)| within(*got, *want, unsettled());
        let settled = eventually(Duration::from_secs(90), || {
            now_s() / 60 > minute && figures().iter().all(within)
        });
        assert!(
            settled,
            "the fleet's figures against the store's ({} positions unsettled): {:?}\n{}",
            unsettled(),
            figures(),
            diagnosis(instances, &counted.borrow(), start)
        );
        eprintln!("give-backs unsettled: {} positions", unsettled());
        // A counter per key (and any a spilled attempt left in this window).
        let n = counted.borrow().len();
        assert!(n >= totals.len(), "{n} counters");
        return;
    }
    panic!("no attempt fitted in one window");
}
