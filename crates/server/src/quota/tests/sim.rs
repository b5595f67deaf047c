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

mod model;

use model::{Demand, Outcome, Scenario, run};

/// What the over-share Envoys get of their fair share at least: the rest is
/// the margin the modest ones keep over their rates.
const GOT: f64 = 0.8;
/// The same with nine modest Envoys to one busy one.
const GOT_MANY: f64 = 0.65;

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
        o.live_most <= 1.0 + crate::quota::share::CHANGE,
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
