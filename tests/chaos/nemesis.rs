//! The nemesis: a schedule of faults drawn from a seed (the same seed, the
//! same schedule), applied to the fleet and recorded with its span.

use std::time::Duration;

use super::fleet::{Fleet, RELOADED, RULES};
use super::history::{Fault, LimitChange, Shared, now_ms};
use super::store::Backend;

/// A small deterministic generator (splitmix64): the seed is the schedule.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The far link's delay each way: its round trip (with the link's own
/// lateness) within the fleet's 50 ms `--redis-timeout`.
const FAR_LINK_MS: u64 = 10;

/// Every fault the nemesis knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    StoreStop,
    StoreKill,
    StoreThrottle,
    InstanceStop,
    InstanceKill,
    Partition,
    Silent,
    Latency,
    FarLink,
    CpuFlood,
    RequestFlood,
    Reload,
    ClockStep,
    Failover,
    Migration,
    XdsGone,
}

pub const KINDS: [Kind; 16] = [
    Kind::StoreStop,
    Kind::StoreKill,
    Kind::StoreThrottle,
    Kind::InstanceStop,
    Kind::InstanceKill,
    Kind::Partition,
    Kind::Silent,
    Kind::Latency,
    Kind::FarLink,
    Kind::CpuFlood,
    Kind::RequestFlood,
    Kind::Reload,
    Kind::ClockStep,
    Kind::Failover,
    Kind::Migration,
    Kind::XdsGone,
];

/// The kinds a fleet on `backend` is held to: a failover only where there
/// are replicas (Sentinel, Cluster), a slot migration only on a Cluster,
/// the xDS server gone only where the rules come over xDS; no clock step on
/// memcached, whose windows follow each instance's own clock (it has no
/// clock to read finer than a second; the book says so). Every store has
/// its links' faults: each instance reaches it through its own proxies.
pub fn kinds(backend: Backend) -> Vec<Kind> {
    KINDS
        .iter()
        .copied()
        .filter(|k| match k {
            Kind::Failover => matches!(backend, Backend::Sentinel | Backend::Cluster),
            Kind::Migration => backend == Backend::Cluster,
            Kind::XdsGone => backend == Backend::Xds,
            Kind::ClockStep => backend != Backend::Memcached,
            _ => true,
        })
        .collect()
}

/// [`kinds`] narrowed by `CHAOS_FAULTS` (words, comma-separated; a kind
/// is kept when its name contains one), all of them without it.
pub fn chosen(backend: Backend) -> Vec<Kind> {
    let all = kinds(backend);
    let Ok(words) = std::env::var("CHAOS_FAULTS") else {
        return all;
    };
    let words: Vec<&str> = words
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    let kept: Vec<Kind> = all
        .into_iter()
        .filter(|k| words.iter().any(|w| k.name().contains(w)))
        .collect();
    assert!(
        !kept.is_empty(),
        "CHAOS_FAULTS={words:?} names no fault kind"
    );
    kept
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::StoreStop => "store SIGSTOP",
            Kind::StoreKill => "store SIGKILL, restarted empty",
            Kind::StoreThrottle => "store throttled (stopped 60 ms of every 90)",
            Kind::InstanceStop => "instance SIGSTOP",
            Kind::InstanceKill => "instance SIGKILL, restarted",
            Kind::Partition => "partition instance-store",
            Kind::Silent => "instance-store link silent",
            Kind::Latency => "instance-store latency 30 ms",
            Kind::FarLink => "instance-store far link (10 ms each way, within the timeout)",
            Kind::CpuFlood => "CPU flood (2 busy loops)",
            Kind::RequestFlood => "request flood (h2load at each instance)",
            Kind::Reload => "reload changing a limit",
            Kind::ClockStep => "instance wall clock stepped 0.3 to 3 s",
            Kind::Failover => "store failover (SENTINEL or CLUSTER FAILOVER)",
            Kind::Migration => "Cluster slots migrated under load",
            Kind::XdsGone => "xDS server gone",
        }
    }

    /// Whether the store's counts are out of reach of some instance, so the
    /// failure policy may decide.
    fn touches_store(self) -> bool {
        matches!(
            self,
            Kind::StoreStop
                | Kind::StoreKill
                | Kind::Partition
                | Kind::Silent
                | Kind::Latency
                | Kind::Failover
        )
    }
}

/// One planned fault: its kind, target, and offsets from the run's start.
#[derive(Debug, Clone)]
pub struct Planned {
    pub kind: Kind,
    pub target: usize,
    pub at_ms: u64,
    pub for_ms: u64,
    /// A clock step's size in ms, ahead or behind.
    pub step_ms: i64,
}

/// The schedule of `seed` over `duration`: every kind once in an order the
/// seed draws, then again, each 1 to 3 s long with 1 to 2 s of quiet
/// between, none in the last 3 s (the fleet settles and is checked healthy).
pub fn schedule(seed: u64, duration: Duration, instances: usize, all: &[Kind]) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let end = u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_sub(3_000);
    let mut plan = Vec::new();
    let mut at = 2_000;
    loop {
        let mut kinds = all.to_vec();
        while !kinds.is_empty() {
            let kind = kinds.swap_remove(rng.below(kinds.len() as u64) as usize);
            let for_ms = 1_000 + rng.below(2_000);
            if at + for_ms > end {
                return plan;
            }
            let target = rng.below(instances as u64) as usize;
            let step = i64::try_from(300 + rng.below(2_700)).unwrap_or(300);
            plan.push(Planned {
                kind,
                target,
                at_ms: at,
                for_ms,
                step_ms: if rng.below(2) == 0 { step } else { -step },
            });
            at += for_ms + 1_000 + rng.below(1_000);
        }
    }
}

/// Applies `plan` from `start_ms`, recording each fault.
pub fn run(fleet: &Fleet, plan: &[Planned], start_ms: u64, history: &Shared) {
    for p in plan {
        sleep_until(start_ms + p.at_ms);
        let start = now_ms();
        apply(fleet, p, true, history);
        sleep_until(start_ms + p.at_ms + p.for_ms);
        apply(fleet, p, false, history);
        let end = now_ms();
        let fault = Fault {
            kind: p.kind.name().to_owned(),
            target: matches!(
                p.kind,
                Kind::InstanceStop
                    | Kind::InstanceKill
                    | Kind::Partition
                    | Kind::Silent
                    | Kind::Latency
                    | Kind::FarLink
                    | Kind::ClockStep
            )
            .then_some(p.target),
            start,
            end,
            store: p.kind.touches_store(),
            // A Sentinel failover loses what the replica had not yet
            // received (a Cluster's waits for its replica to catch up).
            lost: p.kind == Kind::StoreKill
                || p.kind == Kind::Failover && fleet.backend == Backend::Sentinel,
        };
        history.lock().expect("history").faults.push(fault);
        // Between faults: the Sentinel's new master, if any, is the
        // checker's to excuse (`History::switches`), not this fault's.
        if p.kind.touches_store() {
            settle_store(fleet);
        }
    }
}

fn apply(fleet: &Fleet, p: &Planned, on: bool, history: &Shared) {
    let i = p.target;
    match (p.kind, on) {
        (Kind::StoreStop, true) => fleet.signal_store("STOP"),
        (Kind::StoreStop, false) => fleet.signal_store("CONT"),
        (Kind::StoreKill, true) => fleet.kill_store(),
        (Kind::StoreKill, false) => fleet.restart_store(),
        (Kind::StoreThrottle, on) => fleet.throttle_store(on),
        (Kind::InstanceStop, true) => fleet.signal_instance(i, "STOP"),
        (Kind::InstanceStop, false) => fleet.signal_instance(i, "CONT"),
        (Kind::InstanceKill, true) => {
            // The advisor's figures die with the instance: read them first.
            let figures = fleet.admins()[i].and_then(|admin| super::advice::read(i, admin));
            history.lock().expect("history").usage.extend(figures);
            fleet.kill_instance(i);
        }
        (Kind::InstanceKill, false) => fleet.restart_instance(i),
        (Kind::Partition, true) => fleet.proxies[i].partition(),
        (Kind::Silent, true) => fleet.proxies[i].silence(),
        (Kind::Latency, true) => fleet.proxies[i].delay(30),
        // A store far away that answers: slow, not down, so the exact count
        // and every other healthy promise must hold (not `touches_store`).
        (Kind::FarLink, true) => fleet.proxies[i].delay(FAR_LINK_MS),
        (Kind::Partition | Kind::Silent | Kind::Latency | Kind::FarLink, false) => {
            fleet.proxies[i].pass()
        }
        (Kind::ClockStep, true) => fleet.step_clock(i, p.step_ms),
        (Kind::ClockStep, false) => fleet.step_clock(i, 0),
        (Kind::Failover, true) => fleet.failover(p.target),
        (Kind::Migration, true) => {
            let moved = fleet.migrate(p.target);
            history.lock().expect("history").slots_moved += moved;
        }
        (Kind::Failover | Kind::Migration, false) => {}
        (Kind::XdsGone, on) => fleet.xds_gone(on),
        (Kind::CpuFlood, on) => fleet.flood(on),
        (Kind::RequestFlood, on) => fleet.request_flood(on),
        (Kind::Reload, on) => {
            let limit = if on { RELOADED } else { RULES[0].1 };
            let at = now_ms();
            fleet.reload(limit);
            let change = LimitChange {
                rule: RULES[0].0,
                at,
                limit,
            };
            history.lock().expect("history").changes.push(change);
        }
    }
}

/// Waits (the store's lock taken only to look, so the observer reads on)
/// until the Sentinel has settled on one master, after a store fault: the
/// next fault must act on the master it names.
fn settle_store(fleet: &Fleet) {
    let settled = super::common::eventually(Duration::from_secs(30), || {
        fleet.store.lock().expect("store").settled()
    });
    assert!(
        settled,
        "the Sentinel never settled on a master:\n{}",
        fleet.store.lock().expect("store").describe()
    );
}

fn sleep_until(ms: u64) {
    let now = now_ms();
    if ms > now {
        std::thread::sleep(Duration::from_millis(ms - now));
    }
}
