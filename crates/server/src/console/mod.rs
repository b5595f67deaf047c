//! The operator's console on the admin port: a page (`GET /`, every asset
//! compiled in, no network needed) that reads one JSON document
//! (`GET /api/console`) every two seconds.
//!
//! Nothing here is on the request path. A task samples, once a second, the
//! per-rule counters the rules already keep (into [`rates::Rates`]: graphs
//! for the rules with traffic only, at most `--console-max-rules`), the
//! store's health and the config's generation (into journals of failovers
//! and loads). The request path hands it one thing, each over-limit
//! descriptor (as the limiter's [`OverLimitWatch`]), into the bounded sketch
//! of the top over-limit keys ([`top::TopKeys`]).

pub(crate) mod address;
mod history;
mod rates;
mod top;

pub use top::TopKeys;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use history::Journal;
use rates::Rates;
pub use rates::{GRAPHED, WALKED};

use crate::application::App;
use crate::config::{LimitDef, Rule};
use crate::key::CounterKey;
use crate::limiter::{Now, Period};
use crate::service::OverLimitWatch;
use top::WINDOW_SECONDS as TOP_KEYS_WINDOW_SECONDS;

/// Slots of the top over-limit keys by default (`--console-top-keys`).
pub const TOP_KEYS: usize = 64;

/// The page and its assets, compiled into the binary.
pub const PAGE: &str = include_str!("page.html");
pub const SCRIPT: &str = include_str!("page.js");
pub const STYLE: &str = include_str!("page.css");

/// Keys shown in the console's top.
const TOP_SHOWN: usize = 20;
/// A rule is shown as blocking when it refused requests this recently.
const BLOCKING_SECONDS: usize = 10;
/// A domain of at most this many rules shows them all; a bigger one shows
/// this many of its graphed rules, the busiest lately first.
const RULES_SHOWN: usize = 100;

#[derive(Debug, Default)]
struct State {
    rates: Rates,
    failovers: Journal,
    loads: Journal,
    /// The store's `in_use` and health at the last sample.
    store: Option<(&'static str, bool)>,
    ever_healthy: bool,
    generation: u64,
    last_error: Option<String>,
    loaded_at: u64,
}

/// What the console samples and serves.
#[derive(Debug)]
pub struct Console {
    started: Instant,
    state: Mutex<State>,
    /// The descriptors most often over their limit lately.
    top: TopKeys,
}

impl Default for Console {
    fn default() -> Self {
        Console::new(TOP_KEYS, false, GRAPHED, WALKED)
    }
}

impl OverLimitWatch for Console {
    fn over_limit(&self, key: &CounterKey, rule: &str, hits: u64, now: u64) {
        self.top.record(key, rule, hits, now);
    }
}

impl Console {
    /// A console whose top keeps `top_keys` slots, addresses masked unless
    /// `show_addresses`, graphing at most `graphed` rules and looking at
    /// `walked` rules a second for traffic.
    pub fn new(top_keys: usize, show_addresses: bool, graphed: usize, walked: usize) -> Console {
        Console {
            started: Instant::now(),
            state: Mutex::new(State {
                rates: Rates::new(graphed, walked),
                ..State::default()
            }),
            top: TopKeys::new(top_keys, show_addresses),
        }
    }

    /// One sample of rates, store health and config.
    pub fn sample(&self, app: &App, now: u64) {
        let loaded = app.rules.current();
        let status = app.rules.status();
        let health = app.store.health();
        let mut st = self.state.lock();
        let domains = loaded.rules.domains();
        let rules = domains.iter().enumerate().flat_map(|(di, (_, d))| {
            d.rules()
                .iter()
                .enumerate()
                .map(move |(ri, r)| ((di, ri), &r.stats))
        });
        st.rates.sample(Arc::as_ptr(&*loaded) as usize, rules);
        let store = (health.in_use, health.healthy);
        if st.store != Some(store) {
            let what = match (st.store.is_none(), st.ever_healthy, health.healthy) {
                (true, _, false) => format!(
                    "store {} not reached yet; deciding by {}",
                    health.backend, health.in_use
                ),
                (_, false, true) => format!("store {} in use", health.backend),
                (_, true, true) => format!("store {} back", health.backend),
                (_, _, false) => format!(
                    "store down, deciding by {}: {}",
                    health.in_use,
                    health.detail.as_deref().unwrap_or("")
                ),
            };
            st.failovers.push(now, what);
            st.store = Some(store);
            st.ever_healthy |= health.healthy;
        }
        if status.generation != st.generation {
            let counts: Vec<String> = domains
                .iter()
                .map(|(name, d)| format!("{name} {} rules", d.rules().len()))
                .collect();
            st.loads.push(
                now,
                format!(
                    "generation {} loaded: {}",
                    status.generation,
                    counts.join(", ")
                ),
            );
            st.generation = status.generation;
            st.loaded_at = now;
        }
        if status.last_error != st.last_error {
            if let Some(e) = &status.last_error {
                st.loads.push(now, format!("load rejected: {e}"));
            }
            st.last_error = status.last_error;
        }
    }

    /// The `n` keys most often over their limit lately, most first.
    pub fn top_keys(&self, n: usize, now: u64) -> Vec<top::TopKey> {
        self.top.top(n, now)
    }

    /// The document `GET /api/console` answers.
    pub fn snapshot(&self, app: &App, status: &str, now: u64) -> Value {
        let loaded = app.rules.current();
        let config = app.rules.status();
        let health = app.store.health();
        let st = self.state.lock();
        let domains = shown(&st.rates, &loaded);
        let top: Vec<Value> = self
            .top
            .top(TOP_SHOWN, now)
            .into_iter()
            .map(|k| json!({"key": k.key, "over_limit": k.over_limit}))
            .collect();
        let rules = &app.rules;
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "now": now,
            "uptime_seconds": self.started.elapsed().as_secs(),
            "status": status,
            "store": {
                "backend": health.backend,
                "in_use": health.in_use,
                "healthy": health.healthy,
                "detail": health.detail,
                "history": st.failovers.events(),
                // A far store (a steady round trip, no trips) from a slow
                // one, and the renewals that keep hot keys off it.
                "round_trip_ms": app.metrics.store_round_trip().map(|d| d.as_secs_f64() * 1000.0),
                "renewals_ahead": app.metrics.store_renewals_ahead(),
                // Answers that traded exactness (rules that count after).
                "credit_answered": app.metrics.store_credit_answered(),
            },
            "config": {
                "source": if rules.xds_server().is_some() { "xds" } else { "files" },
                "location": rules.xds_server().map_or_else(|| rules.dir().display().to_string(), str::to_owned),
                "version": config.version,
                // `--xds-overlay`: where pushed rules get their shapes.
                "overlay": (rules.xds_server().is_some() && !rules.dir().as_os_str().is_empty())
                    .then(|| rules.dir().display().to_string()),
                "generation": config.generation,
                "loaded_at": st.loaded_at,
                "last_error": config.last_error,
                "history": st.loads.events(),
            },
            "domains": domains,
            "graphs": {"rules_without": st.rates.ungraphed},
            "top_keys": {"window_seconds": TOP_KEYS_WINDOW_SECONDS, "keys": top},
            "quota": {"streams": app.metrics.quota_streams()},
        })
    }
}

/// Each domain's rules as the page shows them: all of a small domain's; of
/// a bigger one (a million per-customer rules), its graphed rules, the
/// busiest lately first, at most [`RULES_SHOWN`].
fn shown(rates: &Rates, loaded: &crate::config::Loaded) -> Vec<Value> {
    let domains = loaded.rules.domains();
    // Places are the last sample's: after a reload, until the next one,
    // big domains show nothing rather than the wrong rules.
    let current = rates.snapshot() == std::ptr::from_ref(loaded) as usize;
    let busiest = if current { rates.busiest() } else { Vec::new() };
    domains
        .iter()
        .enumerate()
        .map(|(di, (name, d))| {
            let all = d.rules();
            let rules: Vec<Value> = if all.len() <= RULES_SHOWN {
                all.iter().map(|r| rule_view(rates, r)).collect()
            } else {
                busiest
                    .iter()
                    .filter(|(d, _)| *d == di)
                    .filter_map(|(_, ri)| all.get(*ri))
                    .take(RULES_SHOWN)
                    .map(|r| rule_view(rates, r))
                    .collect()
            };
            json!({"domain": name, "rules_total": all.len(), "complete": all.len() <= RULES_SHOWN, "rules": rules})
        })
        .collect()
}

/// One rule as the page shows it: its limit and shape, and its last
/// minutes of requests, near-limit and over-limit hits.
fn rule_view(rates: &Rates, r: &Rule) -> Value {
    let samples = rates.of(&r.stats);
    let series = |i: usize| -> Vec<u32> {
        samples
            .iter()
            .map(|s| s.get(i).copied().unwrap_or(0))
            .collect()
    };
    let blocking = samples
        .iter()
        .rev()
        .take(BLOCKING_SECONDS)
        .any(|s| s.get(2).is_some_and(|o| *o > 0));
    let (limit, shape) = describe(&r.limit);
    json!({
        "path": &*r.path,
        "rule": &*r.label,
        "name": r.name.as_deref(),
        "limit": limit,
        "shape": shape,
        "shadow_mode": r.shadow_mode,
        // Counted in the store after it is answered: exactness traded.
        "count_after": r.count_after,
        "blocking": blocking,
        "rates": {"requests": series(0), "near_limit": series(1), "over_limit": series(2)},
    })
}

/// A rule's limit (`30/MINUTE`, `unlimited`) and shape.
fn describe(limit: &LimitDef) -> (String, &'static str) {
    match limit {
        LimitDef::Unlimited => ("unlimited".to_owned(), ""),
        LimitDef::Limited {
            requests_per_unit,
            period,
            algorithm,
        } if *period == Period::CalendarMonth => {
            (format!("{requests_per_unit}/{period}"), "calendar month")
        }
        LimitDef::Limited {
            requests_per_unit,
            period,
            algorithm,
        } => (format!("{requests_per_unit}/{period}"), algorithm.name()),
    }
}

/// Samples once a second until `token` is cancelled. A sample looks at up
/// to `--console-rules-per-second` rules (100,000: about 9 ms of a core),
/// so it runs on a thread of its own at the lowest nice value
/// ([`crate::background`]): a request that wakes meanwhile takes the core
/// at once.
pub async fn run(console: Arc<Console>, app: App, token: CancellationToken) {
    let stop = token.clone();
    let sampling =
        crate::background::spawn("sluice-console", crate::background::LOWEST, move || {
            let mut next = Instant::now();
            while !stop.is_cancelled() {
                console.sample(&app, Now::wall().0);
                next += Duration::from_secs(1);
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
    if let Err(e) = sampling {
        tracing::warn!(error = %e, "the console's sampling thread could not start; the console shows no rates");
    }
    token.cancelled().await;
}

/// The console's document as of now.
pub fn document(console: &Console, app: &App, status: &str) -> Value {
    console.snapshot(app, status, Now::wall().0)
}
