//! The simulated fleet: Envoys with their demand, buckets and reports, one
//! sluice's estimates, split and push rule, stepped on the model's clock.

use std::collections::BTreeMap;
use std::iter::Peekable;
use std::vec::IntoIter;

use crate::limiter::Algorithm;
use crate::quota::estimate::Estimate;
use crate::quota::share::{Assignment, TokenBucket, bucket, split, worth_pushing};
use crate::store::demand::{MemberDemand, UNKNOWN};

/// Seconds between two reports of one Envoy (the shipped rlqs.yaml's).
const REPORT: f64 = 5.0;
/// The model's step, seconds.
const STEP: f64 = 0.01;
/// Seconds a (re)started instance learns before it assigns
/// (`--quota-learning`'s default): Envoys keep what they hold meanwhile.
const LEARNING: f64 = 10.0;
/// Seconds before anything is measured.
const WARMUP: f64 = 30.0;

/// A small deterministic generator (xorshift), so every run is the same.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Seconds to the next arrival of a Poisson process of `rate`.
    fn gap(&mut self, rate: f64) -> f64 {
        if rate <= 0.0 {
            return f64::INFINITY;
        }
        -(1.0 - self.uniform()).ln() / rate
    }
}

/// How one Envoy's demand goes over time: its rate at a second.
pub(super) type Demand = Box<dyn Fn(f64) -> f64>;

struct Envoy {
    demand: Demand,
    /// Present from this second to that one.
    alive: (f64, f64),
    next: f64,
    held: Option<Assignment>,
    tokens: f64,
    estimate: Estimate,
    since_report: u64,
    next_report: f64,
    admitted: u64,
    refused: u64,
    /// Requests and refusals while under its fair share, after warm-up.
    under: (u64, u64),
}

pub(super) struct Scenario {
    pub(super) name: &'static str,
    /// The rule: `limit` per `period` seconds.
    pub(super) limit: u32,
    pub(super) period: u64,
    pub(super) envoys: Vec<(Demand, (f64, f64))>,
    pub(super) seconds: f64,
    /// The sluice instance restarts (forgets every estimate) at these seconds.
    pub(super) restarts: Vec<f64>,
}

#[derive(Debug)]
pub(super) struct Outcome {
    /// Most admitted in one of the rule's windows, after warm-up.
    pub(super) worst_window: u64,
    /// The window furthest over the stated bound: admitted less the budget,
    /// less the bursts the buckets held when it began and those every
    /// replacement in it granted (each replaced bucket starts full). At most
    /// 0 when the bound holds.
    pub(super) over_bound: f64,
    /// Refused over offered, for Envoys under their fair share.
    pub(super) under_refused: f64,
    pub(super) under_offered: u64,
    /// What Envoys over their fair share admitted, over that share: 1 when
    /// the busy ones get all the budget the modest ones leave.
    pub(super) over_got: f64,
    /// The most the Envoys' live buckets refilled a second, together, over
    /// the rule's rate (after warm-up).
    pub(super) live_most: f64,
}

/// The fair share of `rate` among true demands `d` (max-min): the level
/// where what Envoys under it want and the level for the rest add up to the
/// rate. Every Envoy whose demand is under it gets all of it from a fair split.
fn level(rate: f64, d: &[f64]) -> f64 {
    let mut sorted = d.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut left = rate;
    for (pos, want) in sorted.iter().enumerate() {
        let even = left / (sorted.len() - pos) as f64;
        if *want > even {
            return even;
        }
        left -= want;
    }
    f64::INFINITY
}

/// Runs scenario `s` with the arrivals `seed` draws.
pub(super) fn run(s: Scenario, seed: u64) -> Outcome {
    let seconds = s.seconds;
    let mut sim = Sim::new(s, seed);
    let mut t = 0.0;
    while t < seconds {
        sim.step(t);
        t += STEP;
    }
    sim.outcome(seconds, seed)
}

/// The fleet and what is measured of it.
struct Sim {
    envoys: Vec<Envoy>,
    rng: Rng,
    limit: u32,
    period: u64,
    /// The rule's rate a second.
    rate: f64,
    restarts: Peekable<IntoIter<f64>>,
    learning_until: f64,
    /// Admitted per window, after warm-up.
    windows: BTreeMap<u64, u64>,
    /// Per window: the tokens held when it began, and those replacements granted.
    extra: BTreeMap<u64, f64>,
    window_now: u64,
    /// Admitted by over-share Envoys, and their fair share, after warm-up.
    over: (f64, f64),
    live_most: f64,
}

impl Sim {
    fn new(s: Scenario, seed: u64) -> Sim {
        let envoys = s
            .envoys
            .into_iter()
            .enumerate()
            .map(|(i, (demand, alive))| Envoy {
                next: alive.0,
                demand,
                alive,
                held: None,
                tokens: 0.0,
                estimate: Estimate::default(),
                since_report: 0,
                // Envoys report out of step with each other.
                next_report: alive.0 + REPORT * (i as f64 * 0.37).fract() + REPORT,
                admitted: 0,
                refused: 0,
                under: (0, 0),
            })
            .collect();
        Sim {
            envoys,
            rng: Rng(seed | 1),
            limit: s.limit,
            period: s.period,
            rate: f64::from(s.limit) / s.period as f64,
            restarts: s.restarts.into_iter().peekable(),
            learning_until: LEARNING,
            windows: BTreeMap::new(),
            extra: BTreeMap::new(),
            window_now: u64::MAX,
            over: (0.0, 0.0),
            live_most: 0.0,
        }
    }

    /// One step at second `t`: a restart when due, reports and the
    /// assignments they move, then the step's requests.
    fn step(&mut self, t: f64) {
        if self.restarts.next_if(|r| t >= *r).is_some() {
            self.learning_until = t + LEARNING;
            for e in &mut self.envoys {
                e.estimate = Estimate::default();
            }
        }
        let live: Vec<usize> = (0..self.envoys.len())
            .filter(|i| (self.envoys[*i].alive.0..self.envoys[*i].alive.1).contains(&t))
            .collect();
        let truth: Vec<f64> = live.iter().map(|i| (self.envoys[*i].demand)(t)).collect();
        let fair_now = level(self.rate, &truth);
        self.assign(t, &live);
        if t >= WARMUP && t >= self.learning_until {
            self.note_live_rate(&live);
        }
        self.serve(t, &live, &truth, fair_now);
    }

    /// Reports due, the split of the estimates, and each assignment worth
    /// pushing (none while the instance learns).
    fn assign(&mut self, t: f64, live: &[usize]) {
        for &i in live {
            let e = &mut self.envoys[i];
            if t >= e.next_report {
                e.estimate.add(e.since_report, REPORT);
                e.since_report = 0;
                e.next_report += REPORT;
            }
        }
        let members: Vec<MemberDemand> = live
            .iter()
            .map(|i| MemberDemand {
                member: *i as u64,
                demand: if self.envoys[*i].estimate.known() {
                    self.envoys[*i].estimate.claim()
                } else {
                    UNKNOWN
                },
            })
            .collect();
        let shares = split(self.rate, &members);
        let w = (t / self.period as f64) as u64;
        if w != self.window_now {
            self.window_now = w;
            let held: f64 = live.iter().map(|i| self.envoys[*i].tokens).sum();
            *self.extra.entry(w).or_default() += held;
        }
        if t < self.learning_until {
            return;
        }
        for (pos, &i) in live.iter().enumerate() {
            let e = &mut self.envoys[i];
            let new = Assignment::Bucket(bucket(
                shares[pos],
                members[pos].demand,
                self.limit,
                self.period,
                Algorithm::FixedWindow,
                live.len(),
            ));
            if worth_pushing(e.held.as_ref(), &new) {
                if let Assignment::Bucket(b) = new {
                    e.tokens = f64::from(b.max_tokens);
                    *self.extra.entry(w).or_default() += f64::from(b.max_tokens);
                }
                e.held = Some(new);
            }
        }
    }

    /// How much the live buckets refill a second together, over the rate.
    fn note_live_rate(&mut self, live: &[usize]) {
        let live_rate: f64 = live
            .iter()
            .filter_map(|i| match self.envoys[*i].held {
                Some(Assignment::Bucket(b)) => {
                    Some(f64::from(b.tokens_per_fill) / f64::from(b.fill_interval_seconds))
                }
                _ => None,
            })
            .sum();
        self.live_most = self.live_most.max(live_rate / self.rate);
    }

    /// Requests in this step, each against its Envoy's bucket.
    fn serve(&mut self, t: f64, live: &[usize], truth: &[f64], fair_now: f64) {
        let period = self.period as f64;
        for (pos, &i) in live.iter().enumerate() {
            let e = &mut self.envoys[i];
            if let Some(Assignment::Bucket(TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_seconds,
            })) = e.held
            {
                let per_s = f64::from(tokens_per_fill) / f64::from(fill_interval_seconds);
                e.tokens = (e.tokens + per_s * STEP).min(f64::from(max_tokens));
            }
            let under = truth[pos] <= 0.8 * fair_now;
            let busy = t >= WARMUP && truth[pos] > fair_now;
            if busy {
                self.over.1 += fair_now * STEP;
            }
            while e.next < t + STEP {
                let lambda = (e.demand)(e.next);
                e.next += self.rng.gap(lambda).max(1e-6);
                e.since_report += 1;
                let ok = take(e);
                if ok {
                    e.admitted += 1;
                    if busy {
                        self.over.0 += 1.0;
                    }
                    if t >= WARMUP {
                        *self.windows.entry((t / period) as u64).or_default() += 1;
                    }
                } else {
                    e.refused += 1;
                }
                if t >= WARMUP && under {
                    e.under.0 += 1;
                    e.under.1 += u64::from(!ok);
                }
            }
        }
    }

    /// What was measured, whole windows only (the last may be cut short).
    fn outcome(self, seconds: f64, seed: u64) -> Outcome {
        let last = (seconds / self.period as f64) as u64;
        let period = self.period as f64;
        let whole = |w: u64| w < last && (w as f64) * period >= WARMUP;
        let worst_window = self
            .windows
            .iter()
            .filter(|(w, _)| whole(**w))
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0);
        if std::env::var("SIM_DEBUG").is_ok() {
            for (i, e) in self
                .envoys
                .iter()
                .enumerate()
                .filter(|(_, e)| e.under.1 > 0)
            {
                eprintln!(
                    "envoy {i}: under {:?} admitted {} refused {} held {:?} claim {:.3}",
                    e.under,
                    e.admitted,
                    e.refused,
                    e.held,
                    e.estimate.claim()
                );
            }
        }
        let over_bound = self
            .windows
            .iter()
            .filter(|(w, _)| whole(**w))
            .map(|(w, n)| {
                *n as f64 - f64::from(self.limit) - self.extra.get(w).copied().unwrap_or(0.0)
            })
            .fold(f64::NEG_INFINITY, f64::max);
        let (offered, refused) = self
            .envoys
            .iter()
            .fold((0, 0), |(o, r), e| (o + e.under.0, r + e.under.1));
        let out = Outcome {
            worst_window,
            over_bound,
            under_refused: refused as f64 / offered.max(1) as f64,
            under_offered: offered,
            over_got: if self.over.1 > 0.0 {
                self.over.0 / self.over.1
            } else {
                1.0
            },
            live_most: self.live_most,
        };
        if std::env::var("SIM_DEBUG").is_ok() {
            println!("  seed {seed}: {out:?}");
        }
        out
    }
}

/// One request against what Envoy `e` holds: admitted or not.
fn take(e: &mut Envoy) -> bool {
    match e.held {
        None | Some(Assignment::AllowAll) => true,
        Some(Assignment::DenyAll) => false,
        Some(Assignment::Bucket(_)) if e.tokens >= 1.0 => {
            e.tokens -= 1.0;
            true
        }
        Some(Assignment::Bucket(_)) => false,
    }
}
