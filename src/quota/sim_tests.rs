//! Quota mode on a simulated fleet: a discrete-time model of many Envoys,
//! each enforcing its assignment as Envoy 1.40 does (a token bucket refilled
//! continuously, full when replaced) and reporting every 5 s, against the
//! real demand estimate ([`Estimate`]), split ([`split`]), bucket
//! ([`bucket`]) and push rule ([`worth_pushing`]). No sockets, no clock but
//! the model's.
//!
//! Each scenario reports the fleet's most admitted in one window against the
//! budget, and the share of requests refused to Envoys whose demand is under
//! their fair share (max-min, on the true rates), and asserts both bounds.

use super::estimate::Estimate;
use super::share::{Assignment, TokenBucket, bucket, split, worth_pushing};
use crate::limiter::Algorithm;
use crate::store::demand::{MemberDemand, UNKNOWN};

/// Seconds between two reports of one Envoy (the shipped rlqs.yaml's).
const REPORT: f64 = 5.0;
/// The model's step, seconds.
const STEP: f64 = 0.01;
/// Seconds a (re)started instance learns before it assigns
/// (`--quota-learning`'s default): Envoys keep what they hold meanwhile.
const LEARNING: f64 = 10.0;
/// What the over-share Envoys get of their fair share at least: the rest is
/// the margin the modest ones keep over their rates.
const GOT: f64 = 0.8;
/// The same with nine modest Envoys to one busy one.
const GOT_MANY: f64 = 0.65;

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
type Demand = Box<dyn Fn(f64) -> f64>;

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

struct Scenario {
    name: &'static str,
    /// The rule: `limit` per `period` seconds.
    limit: u32,
    period: u64,
    envoys: Vec<(Demand, (f64, f64))>,
    seconds: f64,
    /// The sluice instance restarts (forgets every estimate) at these seconds.
    restarts: Vec<f64>,
}

#[derive(Debug)]
struct Outcome {
    /// Most admitted in one of the rule's windows, after warm-up.
    worst_window: u64,
    /// The window furthest over the stated bound: admitted less the budget,
    /// less the bursts the buckets held when it began and those every
    /// replacement in it granted (each replaced bucket starts full). At most
    /// 0 when the bound holds.
    over_bound: f64,
    /// Refused over offered, for Envoys under their fair share.
    under_refused: f64,
    under_offered: u64,
    /// What Envoys over their fair share admitted, over that share: 1 when
    /// the busy ones get all the budget the modest ones leave.
    over_got: f64,
    /// The most the Envoys' live buckets refilled a second, together, over
    /// the rule's rate (after warm-up).
    live_most: f64,
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

fn run(s: Scenario, seed: u64) -> Outcome {
    let mut rng = Rng(seed | 1);
    let mut envoys: Vec<Envoy> = s
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
    let rate = f64::from(s.limit) / s.period as f64;
    let warmup = 30.0;
    let mut windows: std::collections::BTreeMap<u64, u64> = Default::default();
    // Per window: the tokens held when it began, and those replacements granted.
    let mut extra: std::collections::BTreeMap<u64, f64> = Default::default();
    let mut window_now = u64::MAX;
    let mut restarts = s.restarts.iter().copied().peekable();
    let mut learning_until = LEARNING;
    // Admitted by over-share Envoys, and their fair share, after warm-up.
    let mut over = (0.0_f64, 0.0_f64);
    let mut live_most = 0.0_f64;
    let mut t = 0.0;
    while t < s.seconds {
        if restarts.peek().is_some_and(|r| t >= *r) {
            restarts.next();
            learning_until = t + LEARNING;
            for e in &mut envoys {
                e.estimate = Estimate::default();
            }
        }
        let live: Vec<usize> = (0..envoys.len())
            .filter(|i| (envoys[*i].alive.0..envoys[*i].alive.1).contains(&t))
            .collect();
        let truth: Vec<f64> = live.iter().map(|i| (envoys[*i].demand)(t)).collect();
        let fair_now = level(rate, &truth);
        // Reports, then the assignments they move.
        for &i in &live {
            let e = &mut envoys[i];
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
                demand: if envoys[*i].estimate.known() {
                    envoys[*i].estimate.claim()
                } else {
                    UNKNOWN
                },
            })
            .collect();
        let shares = split(rate, &members);
        let w = (t / s.period as f64) as u64;
        if w != window_now {
            window_now = w;
            let held: f64 = live.iter().map(|i| envoys[*i].tokens).sum();
            *extra.entry(w).or_default() += held;
        }
        for (pos, &i) in live.iter().enumerate() {
            let e = &mut envoys[i];
            if t < learning_until {
                continue;
            }
            let new = Assignment::Bucket(bucket(
                shares[pos],
                members[pos].demand,
                s.limit,
                s.period,
                Algorithm::FixedWindow,
                live.len(),
            ));
            if worth_pushing(e.held.as_ref(), &new) {
                if let Assignment::Bucket(b) = new {
                    e.tokens = f64::from(b.max_tokens);
                    *extra.entry(w).or_default() += f64::from(b.max_tokens);
                }
                e.held = Some(new);
            }
        }
        if t >= warmup && t >= learning_until {
            let live_rate: f64 = live
                .iter()
                .filter_map(|i| match envoys[*i].held {
                    Some(Assignment::Bucket(b)) => {
                        Some(f64::from(b.tokens_per_fill) / f64::from(b.fill_interval_seconds))
                    }
                    _ => None,
                })
                .sum();
            live_most = live_most.max(live_rate / rate);
        }
        // Requests in this step, each against its Envoy's bucket.
        for (pos, &i) in live.iter().enumerate() {
            let e = &mut envoys[i];
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
            let busy = t >= warmup && truth[pos] > fair_now;
            if busy {
                over.1 += fair_now * STEP;
            }
            while e.next < t + STEP {
                let lambda = (e.demand)(e.next);
                e.next += rng.gap(lambda).max(1e-6);
                e.since_report += 1;
                let ok = match e.held {
                    None | Some(Assignment::AllowAll) => true,
                    Some(Assignment::DenyAll) => false,
                    Some(Assignment::Bucket(_)) if e.tokens >= 1.0 => {
                        e.tokens -= 1.0;
                        true
                    }
                    Some(Assignment::Bucket(_)) => false,
                };
                if ok {
                    e.admitted += 1;
                    if busy {
                        over.0 += 1.0;
                    }
                    if t >= warmup {
                        *windows.entry((t / s.period as f64) as u64).or_default() += 1;
                    }
                } else {
                    e.refused += 1;
                }
                if t >= warmup && under {
                    e.under.0 += 1;
                    e.under.1 += u64::from(!ok);
                }
            }
        }
        t += STEP;
    }
    // Whole windows only: the last may be cut short.
    let last = (s.seconds / s.period as f64) as u64;
    let worst_window = windows
        .iter()
        .filter(|(w, _)| **w < last && (**w as f64) * (s.period as f64) >= warmup)
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0);
    if std::env::var("SIM_DEBUG").is_ok() {
        for (i, e) in envoys.iter().enumerate() {
            if e.under.1 > 0 {
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
    }
    let over_bound = windows
        .iter()
        .filter(|(w, _)| **w < last && (**w as f64) * (s.period as f64) >= warmup)
        .map(|(w, n)| *n as f64 - f64::from(s.limit) - extra.get(w).copied().unwrap_or(0.0))
        .fold(f64::NEG_INFINITY, f64::max);
    let (offered, refused) = envoys
        .iter()
        .fold((0, 0), |(o, r), e| (o + e.under.0, r + e.under.1));
    let out = Outcome {
        worst_window,
        over_bound,
        under_refused: refused as f64 / offered.max(1) as f64,
        under_offered: offered,
        over_got: if over.1 > 0.0 { over.0 / over.1 } else { 1.0 },
        live_most,
    };
    if std::env::var("SIM_DEBUG").is_ok() {
        println!("  seed {seed}: {out:?}");
    }
    out
}

/// Runs the scenario `make` builds on five seeds: the worst window and bound
/// of any, refusals over all, the least any seed gave the over-share Envoys.
fn seeds(make: impl Fn() -> Scenario) -> Outcome {
    let name = make().name;
    let limit = make().limit;
    let all: Vec<Outcome> = [7, 11, 13, 17, 19]
        .iter()
        .map(|s| run(make(), *s))
        .collect();
    let offered: u64 = all.iter().map(|o| o.under_offered).sum();
    let refused: f64 = all
        .iter()
        .map(|o| o.under_refused * o.under_offered as f64)
        .sum();
    let out = Outcome {
        worst_window: all.iter().map(|o| o.worst_window).max().unwrap_or(0),
        over_bound: all
            .iter()
            .map(|o| o.over_bound)
            .fold(f64::NEG_INFINITY, f64::max),
        under_refused: refused / offered.max(1) as f64,
        under_offered: offered,
        over_got: all.iter().map(|o| o.over_got).fold(f64::INFINITY, f64::min),
        live_most: all.iter().map(|o| o.live_most).fold(0.0, f64::max),
    };
    println!(
        "{}: worst window {} of {} ({:.2}x, {:.0} from the bound); under-share refused {:.2}% of {}; over-share got {:.2} of their share; live buckets at most {:.3} of the rate",
        name,
        out.worst_window,
        limit,
        out.worst_window as f64 / f64::from(limit),
        out.over_bound,
        out.under_refused * 100.0,
        out.under_offered,
        out.over_got,
        out.live_most
    );
    out
}

fn steady(rate: f64) -> Demand {
    Box::new(move |_| rate)
}

fn always() -> (f64, f64) {
    (0.0, f64::INFINITY)
}

/// Checks the bounds: under-share Envoys get all but `refused` of their
/// requests through; in any window the fleet admits at most the budget plus
/// the bursts held and granted in it, and at most `slack` of the budget more;
/// Envoys over their share get at least `got` of it; and the buckets live at
/// one time refill at most a tenth over the rule's rate.
fn holds(o: &Outcome, limit: u32, refused: f64, slack: f64, got: f64) {
    assert!(o.under_offered > 0, "no Envoy was under its share");
    assert!(
        o.under_refused <= refused,
        "under-share refused {:.4}",
        o.under_refused
    );
    assert!(
        o.over_bound <= 0.0,
        "{} over the stated bound",
        o.over_bound
    );
    let most = f64::from(limit) * (1.0 + slack);
    assert!(o.worst_window as f64 <= most, "{} > {most}", o.worst_window);
    assert!(o.over_got >= got, "over-share got {:.2}", o.over_got);
    // Live buckets add up to the rate plus what the push rule lets one
    // hold over its share.
    assert!(
        o.live_most <= 1.0 + super::share::CHANGE,
        "live buckets at {:.3} of the rate",
        o.live_most
    );
}

#[test]
fn two_envoys_a_busy_one_and_a_quiet_one() {
    // The case measured on real Envoys: 120 per minute, 18/s against 0.5/s.
    let o = seeds(|| Scenario {
        name: "2 Envoys, 18/s and 0.5/s",
        limit: 120,
        period: 60,
        envoys: vec![(steady(18.0), always()), (steady(0.5), always())],
        seconds: 600.0,
        restarts: vec![],
    });
    holds(&o, 120, 0.01, 0.1, GOT);
}

#[test]
fn ten_envoys_one_flooding() {
    let o = seeds(|| {
        let mut envoys: Vec<(Demand, (f64, f64))> = vec![(steady(50.0), always())];
        for i in 0..9 {
            envoys.push((steady(0.2 + 0.1 * f64::from(i)), always()));
        }
        Scenario {
            name: "10 Envoys, one flooding",
            limit: 600,
            period: 60,
            envoys,
            seconds: 600.0,
            restarts: vec![],
        }
    });
    // Nine modest Envoys each keep a margin over their rate.
    holds(&o, 600, 0.01, 0.1, GOT_MANY);
}

#[test]
fn a_hundred_envoys_bursty_and_poisson() {
    let o = seeds(|| {
        let mut envoys: Vec<(Demand, (f64, f64))> = Vec::new();
        for i in 0..100 {
            let base = 0.05 + 0.01 * f64::from(i % 10);
            let d: Demand = if i % 4 == 0 {
                // On for 10 s in every 30 at four times the rate.
                Box::new(move |t: f64| if t % 30.0 < 10.0 { base * 4.0 } else { 0.0 })
            } else if i < 8 {
                steady(40.0)
            } else {
                steady(base)
            };
            envoys.push((d, always()));
        }
        Scenario {
            name: "100 Envoys, bursty and Poisson",
            limit: 6000,
            period: 60,
            envoys,
            seconds: 600.0,
            restarts: vec![],
        }
    });
    holds(&o, 6000, 0.01, 0.1, GOT);
}

#[test]
fn envoys_join_and_leave_a_restart_and_a_spike() {
    let o = seeds(|| {
        let spike: Demand = Box::new(|t: f64| {
            if (300.0..360.0).contains(&t) {
                3.0
            } else {
                0.3
            }
        });
        Scenario {
            name: "join, leave, restart, spike",
            limit: 300,
            period: 60,
            envoys: vec![
                (steady(20.0), always()),
                (steady(0.4), always()),
                (steady(0.6), (120.0, f64::INFINITY)),
                (steady(0.5), (0.0, 240.0)),
                (spike, always()),
            ],
            seconds: 600.0,
            restarts: vec![420.0],
        }
    });
    holds(&o, 300, 0.01, 0.1, GOT);
}
