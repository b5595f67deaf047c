//! What happened in one run: every operation (instance, key, send and answer
//! time, answer, limit in force), every fault's start and end, and what
//! each instance said of its store. Times are milliseconds of the wall
//! clock, which every process here shares.

use std::sync::{Arc, Mutex};

use serde_json::json;

pub use crate::common::pulse::now_ms;

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    OverLimit,
    /// A gRPC error (shed, unavailable, deadline): nothing was admitted.
    Error(i32),
}

#[derive(Debug, Clone)]
pub struct Op {
    pub instance: usize,
    /// The rule's key and the value asked for (the counter).
    pub rule: &'static str,
    pub value: String,
    pub hits: u32,
    /// Hits given back (`is_negative_hits`): a refund, or a slot's release.
    pub refund: bool,
    /// A concurrency slot's id (0: none), taken or, with `refund`, released.
    pub slot: u64,
    pub sent: u64,
    pub answered: u64,
    pub answer: Answer,
}

/// A fault the nemesis applied, from `start` until `end`.
#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: String,
    /// The instance it was applied to, when one.
    pub target: Option<usize>,
    pub start: u64,
    pub end: u64,
    /// It touches the store's counts (the failure policy may decide), so
    /// windows under it are held to the failure policy's bound.
    pub store: bool,
    /// The store lost its data (a restart empty).
    pub lost: bool,
}

impl Op {
    /// One hit of `rule`=`value` on instance 0, sent at `at` and admitted a
    /// millisecond later: the checker's tests build histories of them.
    pub fn admitted(rule: &'static str, value: &str, at: u64) -> Op {
        Op {
            instance: 0,
            rule,
            value: value.into(),
            hits: 1,
            refund: false,
            slot: 0,
            sent: at,
            answered: at + 1,
            answer: Answer::Ok,
        }
    }
}

/// A span in which an instance said its store was not in use (`/readyz`
/// `degraded`): the failure policy decided its requests.
#[derive(Debug, Clone)]
pub struct Degraded {
    pub instance: usize,
    pub start: u64,
    pub end: u64,
}

/// A trip of an instance's breaker (`sluice_store_circuit_trips_total`
/// went up) between two readings of its `/metrics`, at `after` and `by`:
/// a trip too short for `/readyz` to be seen `degraded` still counts.
#[derive(Debug, Clone)]
pub struct Trip {
    pub instance: usize,
    pub after: u64,
    pub by: u64,
}

/// A silence of instance `instance`'s link from `start` to `end`.
#[derive(Debug, Clone, Copy)]
pub struct Stall {
    pub instance: usize,
    pub start: u64,
    pub end: u64,
}

/// A limit change made by a reload at `at`.
#[derive(Debug, Clone)]
pub struct LimitChange {
    pub rule: &'static str,
    pub at: u64,
    pub limit: u32,
}

/// What a reference instance would read in the store for one counter and
/// window (`--key-format envoyproxy`): `None` when the key was absent.
#[derive(Debug, Clone)]
pub struct RefRead {
    pub rule: &'static str,
    pub value: String,
    pub window: u64,
    pub count: Option<u64>,
}

/// An operator's reset of one counter through one instance's admin port,
/// sent at `sent` and answered at `answered` with `status` (0: no answer,
/// the instance stopped or gone). Any reset may have emptied the counter,
/// answered or not.
#[derive(Debug, Clone)]
pub struct Reset {
    pub instance: usize,
    pub rule: &'static str,
    pub value: String,
    pub sent: u64,
    pub answered: u64,
    pub status: u16,
}

#[derive(Debug, Default)]
pub struct History {
    pub reference: Vec<RefRead>,
    pub seed: u64,
    pub ops: Vec<Op>,
    pub faults: Vec<Fault>,
    pub degraded: Vec<Degraded>,
    pub trips: Vec<Trip>,
    /// When an instance's link (the store through its proxy) went silent
    /// for a stall, as its pulse (`pulse.rs`) proved.
    pub stalls: Vec<Stall>,
    pub changes: Vec<LimitChange>,
    pub resets: Vec<Reset>,
    /// On Cluster, the slots the nemesis moved between masters.
    pub slots_moved: usize,
    /// On Sentinel, when the master's port changed (the first reading too).
    pub masters: Vec<(u64, u16)>,
    /// Lookups an operator made, and how many were answered 200.
    pub lookups: (u64, u64),
    /// The advisor's figures of each instance's life: read before it was
    /// killed, and at the end.
    pub usage: Vec<super::advice::UsageRead>,
}

pub type Shared = Arc<Mutex<History>>;

/// How long after the Sentinel names a new master an instance may still
/// count on the old one: it asks the sentinels at once when one announces
/// the failover, and every `--redis-sentinel-recheck` (1 s) in case it
/// missed it, plus a round trip and this machine's scheduling.
pub const FOLLOW_MS: u64 = 1_800;
/// How late the observer may see a new master (it reads every 100 ms).
const SEEN_MS: u64 = 200;

/// The Sentinel's kind of fault: its naming a new master (`masters`).
pub const SWITCH: &str = "the Sentinel named a new master";

impl History {
    /// Each new master the Sentinel named, as a store fault that lost
    /// counts (a promoted replica lacks what it had not yet received),
    /// from just before the observer saw it until the instances have
    /// followed: Redis Sentinel fences nothing, so for that long an
    /// instance may count on the old master while another counts on the
    /// new one.
    pub fn switches(&self) -> Vec<Fault> {
        self.masters
            .iter()
            .skip(1)
            .map(|&(at, _)| Fault {
                kind: SWITCH.to_owned(),
                target: None,
                start: at.saturating_sub(SEEN_MS),
                end: at + FOLLOW_MS,
                store: true,
                lost: true,
            })
            .collect()
    }

    /// The history as JSON lines, for `CHAOS_HISTORY` and for reading a
    /// violation back.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for f in &self.faults {
            let line = json!({"fault": f.kind, "target": f.target, "start": f.start, "end": f.end});
            out.push_str(&format!("{line}\n"));
        }
        for d in &self.degraded {
            let line = json!({"degraded": d.instance, "start": d.start, "end": d.end});
            out.push_str(&format!("{line}\n"));
        }
        for t in &self.trips {
            let line = json!({"trip": t.instance, "after": t.after, "by": t.by});
            out.push_str(&format!("{line}\n"));
        }
        for st in &self.stalls {
            let line = json!({"stall": st.instance, "start": st.start, "end": st.end});
            out.push_str(&format!("{line}\n"));
        }
        for c in &self.changes {
            let line = json!({"reload": c.rule, "at": c.at, "limit": c.limit});
            out.push_str(&format!("{line}\n"));
        }
        for (at, port) in &self.masters {
            let line = json!({"master": port, "at": at});
            out.push_str(&format!("{line}\n"));
        }
        for u in &self.usage {
            let line = json!({"usage": u.instance, "at": u.at, "limits": super::advice::LIMITS, "figures": u.figures});
            out.push_str(&format!("{line}\n"));
        }
        for r in &self.resets {
            let line = json!({"reset": format!("{}={}", r.rule, r.value), "instance": r.instance,
                "sent": r.sent, "answered": r.answered, "status": r.status});
            out.push_str(&format!("{line}\n"));
        }
        for o in &self.ops {
            let answer = match o.answer {
                Answer::Ok => "OK".to_owned(),
                Answer::OverLimit => "OVER_LIMIT".to_owned(),
                Answer::Error(code) => format!("error {code}"),
            };
            let line = json!({"instance": o.instance, "key": format!("{}={}", o.rule, o.value),
                "hits": o.hits, "refund": o.refund, "slot": o.slot, "sent": o.sent, "answered": o.answered, "answer": answer});
            out.push_str(&format!("{line}\n"));
        }
        out
    }
}
