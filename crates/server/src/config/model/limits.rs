//! The `rate_limit` block and its extensions: the reference's fields
//! (`unit`, `requests_per_unit`, `unlimited`, `name`, `replaces`) and
//! sluice's (`window`, `algorithm`, `burst`, `on_store_failure`, ...).

use super::super::yaml::{Location, Node, Value};
use super::{LimitDef, Parser, RateLimitDef, join, key_of};
use crate::limiter::{Algorithm, MAX_WINDOW_SECONDS, Period, Unit};
use crate::store::FailurePolicy;

/// The fields of one `rate_limit` block as written, each with its node (for
/// the position of an error about it).
#[derive(Default)]
struct Fields<'n> {
    unit: Option<(String, &'n Node)>,
    requests_per_unit: u32,
    unlimited: bool,
    name: Option<String>,
    replaces: Vec<(String, Location)>,
    /// The window, when it was valid; `window_given` says one was written.
    window: Option<(Period, &'n Node)>,
    window_given: bool,
    algorithm: Option<(String, &'n Node)>,
    burst: Option<(u32, &'n Node)>,
    overdraft: Option<(bool, &'n Node)>,
    on_failure: Option<FailurePolicy>,
    refundable: bool,
    /// `leased_allowance:` as written (unset: on).
    leased_allowance: Option<bool>,
    count_after: Option<(bool, &'n Node)>,
    /// `algorithm: concurrency`'s bound and lease.
    max_in_flight: Option<(u32, &'n Node)>,
    lease: Option<(Period, &'n Node)>,
    lease_given: bool,
}

impl Parser<'_> {
    pub(super) fn rate_limit(&mut self, node: &Node, path: &str) -> Option<RateLimitDef> {
        let entries = match &node.value {
            Value::Map(entries) => entries.as_slice(),
            Value::Null => &[],
            other => {
                let msg = format!(
                    "error loading config file: rate_limit must be a map, not a {}",
                    other.kind()
                );
                self.error(&node.referenced, path, msg);
                return None;
            }
        };
        let f = self.rate_limit_fields(entries, path);
        let limit = if f.unlimited {
            if let Some((u, v)) = &f.unit
                && Unit::parse(u).is_some()
            {
                self.error(
                    &v.referenced,
                    &join(path, "unit"),
                    "should not specify rate limit unit when unlimited",
                );
            }
            LimitDef::Unlimited
        } else if f
            .algorithm
            .as_ref()
            .is_some_and(|(a, _)| a == "concurrency")
        {
            self.concurrency(node, path, &f)?
        } else {
            self.no_concurrency_fields(path, &f)?;
            let period = self.period(node, path, &f)?;
            let algorithm =
                self.algorithm(path, f.algorithm, f.burst, f.requests_per_unit, period)?;
            let algorithm = self.overdraft(path, algorithm, f.overdraft)?;
            LimitDef::Limited {
                requests_per_unit: f.requests_per_unit,
                period,
                algorithm,
            }
        };
        self.check_replaces(path, f.name.as_deref(), &f.replaces);
        let count_after = self.count_after(path, f.count_after, &limit, f.refundable);
        Some(RateLimitDef {
            limit,
            name: f.name,
            replaces: f.replaces.into_iter().map(|(r, _)| r).collect(),
            on_failure: f.on_failure,
            refundable: f.refundable,
            leased_allowance: f.leased_allowance.unwrap_or(true),
            count_after,
        })
    }

    /// Reads each field of the block; an unknown one is an error.
    fn rate_limit_fields<'n>(&mut self, entries: &'n [(Node, Node)], path: &str) -> Fields<'n> {
        let mut f = Fields::default();
        for (k, v) in entries {
            let key = key_of(k);
            let field = join(path, key);
            match key {
                "unit" => f.unit = Some((self.string(v, &field).unwrap_or_default(), v)),
                "requests_per_unit" => f.requests_per_unit = self.uint32(v, &field),
                "unlimited" => f.unlimited = self.boolean(v, &field),
                "name" => f.name = self.string(v, &field).filter(|s| !s.is_empty()),
                "replaces" => f.replaces = self.replaces(v, &field),
                "window" => {
                    f.window_given = true;
                    f.window = self.window(v, &field).map(|w| (w, v));
                }
                "algorithm" => f.algorithm = self.string(v, &field).map(|a| (a, v)),
                "burst" => f.burst = Some((self.uint32(v, &field), v)),
                "overdraft" => f.overdraft = Some((self.boolean(v, &field), v)),
                "on_store_failure" => f.on_failure = self.failure_policy(v, &field),
                "refundable" => f.refundable = self.boolean(v, &field),
                "leased_allowance" => f.leased_allowance = Some(self.boolean(v, &field)),
                "count_after" => f.count_after = Some((self.boolean(v, &field), v)),
                "max_in_flight" => f.max_in_flight = Some((self.uint32(v, &field), v)),
                "lease" => {
                    f.lease_given = true;
                    f.lease = self.window(v, &field).map(|w| (w, v));
                }
                other => self.misplaced(k, other, "rate_limit"),
            }
        }
        f
    }

    /// `algorithm: concurrency`: at most `max_in_flight` slots held at once,
    /// each returned by its release or after `lease`. A period or a rate
    /// would mean nothing here, so they are refused.
    fn concurrency(&mut self, node: &Node, path: &str, f: &Fields<'_>) -> Option<LimitDef> {
        for (given, field) in [
            (f.unit.is_some(), "unit"),
            (f.window_given, "window"),
            (f.requests_per_unit > 0, "requests_per_unit"),
            (f.burst.is_some(), "burst"),
            (f.overdraft.is_some(), "overdraft"),
        ] {
            if given {
                let msg = format!(
                    "{field} is not for algorithm: concurrency (give max_in_flight and lease)"
                );
                self.error(&node.referenced, &join(path, field), msg);
                return None;
            }
        }
        let max = match f.max_in_flight {
            Some((n, _)) if n > 0 => n,
            Some((_, v)) => {
                self.error(
                    &v.referenced,
                    &join(path, "max_in_flight"),
                    "max_in_flight must be at least 1",
                );
                return None;
            }
            None => {
                let msg = "algorithm: concurrency needs max_in_flight (slots held at once)";
                self.error(&node.referenced, &join(path, "max_in_flight"), msg);
                return None;
            }
        };
        let Some((lease, _)) = f.lease else {
            if !f.lease_given {
                let msg = "algorithm: concurrency needs lease (how long a slot never released is held, such as 60s)";
                self.error(&node.referenced, &join(path, "lease"), msg);
            }
            return None;
        };
        Some(LimitDef::Limited {
            requests_per_unit: max,
            period: lease,
            algorithm: Algorithm::Concurrency,
        })
    }

    /// `max_in_flight` and `lease` belong to `algorithm: concurrency` only.
    fn no_concurrency_fields(&mut self, path: &str, f: &Fields<'_>) -> Option<()> {
        let stray = [
            f.max_in_flight.map(|(_, v)| (v, "max_in_flight")),
            f.lease.map(|(_, v)| (v, "lease")),
        ];
        if let Some((v, field)) = stray.into_iter().flatten().next() {
            let msg = format!("{field} is only for algorithm: concurrency");
            self.error(&v.referenced, &join(path, field), msg);
            return None;
        }
        Some(())
    }

    /// The block's period: a `unit` or a `window`, never both.
    fn period(&mut self, node: &Node, path: &str, f: &Fields<'_>) -> Option<Period> {
        match (&f.unit, f.window) {
            (Some(_), Some((_, w))) => {
                self.error(
                    &w.referenced,
                    &join(path, "window"),
                    "rate_limit has both unit and window; give one",
                );
                None
            }
            (None, Some((w, _))) => Some(w),
            // A window was given and refused: that one error says it.
            (_, None) if f.window_given => None,
            (_, None) => {
                let text = f.unit.as_ref().map(|(u, _)| u.as_str()).unwrap_or_default();
                if let Some(unit) = Unit::parse(text) {
                    return Some(Period::Unit(unit));
                }
                let loc = f
                    .unit
                    .as_ref()
                    .map_or(&node.referenced, |(_, v)| &v.referenced);
                self.error(
                    loc,
                    &join(path, "unit"),
                    format!("invalid rate limit unit '{text}'"),
                );
                None
            }
        }
    }

    /// `replaces` entries must be names, and not the block's own.
    fn check_replaces(&mut self, path: &str, name: Option<&str>, replaces: &[(String, Location)]) {
        for (i, (r, loc)) in replaces.iter().enumerate() {
            let field = format!("{path}.replaces[{i}].name");
            if r.is_empty() {
                self.error(loc, &field, "should not have an empty replaces entry");
            } else if name == Some(r.as_str()) {
                self.error(
                    loc,
                    &field,
                    "replaces should not contain name of same descriptor",
                );
            }
        }
    }

    /// `rate_limits:`, a list of `rate_limit` blocks.
    pub(super) fn rate_limits(&mut self, node: &Node, path: &str) -> Vec<RateLimitDef> {
        let Value::Seq(items) = &node.value else {
            let msg = format!("rate_limits must be a list, not a {}", node.value.kind());
            self.error(&node.referenced, path, msg);
            return Vec::new();
        };
        if items.is_empty() {
            self.error(&node.referenced, path, "rate_limits must not be empty");
        }
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| self.rate_limit(item, &format!("{path}[{i}]")))
            .collect()
    }

    /// `on_store_failure: fallback | allow | deny`.
    fn failure_policy(&mut self, node: &Node, field: &str) -> Option<FailurePolicy> {
        let text = self.string(node, field)?;
        let policy = FailurePolicy::parse(&text);
        if policy.is_none() {
            let msg = format!("unknown on_store_failure '{text}': fallback, allow or deny");
            self.error(&node.referenced, field, msg);
        }
        policy
    }

    /// `window: 90s`: whole seconds with an `s`, `m`, `h` or `d` suffix (or a
    /// bare number of seconds), from 1 s to 366 days.
    fn window(&mut self, node: &Node, field: &str) -> Option<Period> {
        let text = match &node.value {
            Value::Int(i) => format!("{i}s"),
            Value::Str(s) => s.trim().to_ascii_lowercase(),
            other => {
                let msg = format!(
                    "window must be a duration such as 90s, 15m, 2h or 1d, not a {}",
                    other.kind()
                );
                self.error(&node.referenced, field, msg);
                return None;
            }
        };
        let scale = match text.chars().last() {
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3_600,
            Some('d') => 86_400,
            _ => 0,
        };
        let seconds = text
            .get(..text.len().saturating_sub(1))
            .and_then(|n| n.parse::<u64>().ok())
            .map(|n| n.saturating_mul(scale))
            .filter(|n| (1..=u64::from(MAX_WINDOW_SECONDS)).contains(n));
        match seconds.and_then(|n| u32::try_from(n).ok()) {
            Some(n) => Some(Period::Seconds(n)),
            None => {
                let msg = format!(
                    "invalid window '{text}': a whole number of seconds from 1s to 366d, with an s, m, h or d suffix"
                );
                self.error(&node.referenced, field, msg);
                None
            }
        }
    }

    /// `algorithm:` (default fixed_window) and its `burst:`.
    fn algorithm(
        &mut self,
        path: &str,
        algorithm: Option<(String, &Node)>,
        burst: Option<(u32, &Node)>,
        rpu: u32,
        period: Period,
    ) -> Option<Algorithm> {
        let algo = match algorithm.as_ref().map(|(a, v)| (a.as_str(), v)) {
            None | Some(("fixed_window", _)) => Algorithm::FixedWindow,
            Some(("sliding_window", _)) => Algorithm::SlidingWindow,
            Some(("token_bucket", _)) => {
                Algorithm::token_bucket(rpu, period.seconds(), burst.map_or(rpu, |(b, _)| b))
            }
            Some((other, v)) => {
                let msg = format!(
                    "unknown algorithm '{other}': fixed_window, sliding_window, token_bucket or concurrency"
                );
                self.error(&v.referenced, &join(path, "algorithm"), msg);
                return None;
            }
        };
        if let Some((b, v)) = burst {
            if !matches!(algo, Algorithm::TokenBucket { .. }) {
                self.error(
                    &v.referenced,
                    &join(path, "burst"),
                    "burst is only for algorithm: token_bucket",
                );
                return None;
            }
            if b == 0 {
                self.error(
                    &v.referenced,
                    &join(path, "burst"),
                    "burst must be at least 1",
                );
                return None;
            }
        }
        Some(algo)
    }

    /// `overdraft: true`: a token bucket takes every charge, into debt.
    fn overdraft(
        &mut self,
        path: &str,
        algo: Algorithm,
        overdraft: Option<(bool, &Node)>,
    ) -> Option<Algorithm> {
        match (overdraft, algo) {
            (None | Some((false, _)), _) => Some(algo),
            (Some((true, _)), Algorithm::TokenBucket { .. }) => Some(algo.with_overdraft()),
            (Some((true, v)), _) => {
                self.error(
                    &v.referenced,
                    &join(path, "overdraft"),
                    "overdraft is only for algorithm: token_bucket",
                );
                None
            }
        }
    }

    fn replaces(&mut self, node: &Node, path: &str) -> Vec<(String, Location)> {
        let items = match &node.value {
            Value::Seq(items) => items.as_slice(),
            Value::Null => &[],
            other => {
                let msg = format!(
                    "error loading config file: replaces must be a list, not a {}",
                    other.kind()
                );
                self.error(&node.referenced, path, msg);
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let mut name = String::new();
            if let Value::Map(entries) = &item.value {
                for (k, v) in entries {
                    let field = format!("{path}[{i}].{}", key_of(k));
                    match key_of(k) {
                        "name" => name = self.string(v, &field).unwrap_or_default(),
                        other => self.misplaced(k, other, "a replaces entry"),
                    }
                }
            }
            out.push((name, item.referenced));
        }
        out
    }
}
