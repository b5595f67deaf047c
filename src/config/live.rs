//! The rules in force, swapped whole on every successful load: a request reads
//! one snapshot without taking a lock and sees either the old rules or the new
//! ones, never a mix.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tracing::{debug, error, info};

use super::{LoadError, LoadOptions, Rules, load_dir, stat_fingerprint};
use crate::rule_stats::RuleCounters;

/// Who hears how the rules load (the metrics, watching from the side): it
/// hands compiled rules their counters and is told of every load, so config
/// compiles and reloads knowing nothing of metrics.
pub trait RulesObserver: RuleCounters + Send + Sync + std::fmt::Debug {
    /// A load put `generation` in force (`Ok`), or was rejected (`Err`).
    fn loaded(&self, outcome: Result<u64, ()>);
    /// The xDS stream failed; whether to log it (not more than once in 10 s).
    fn xds_failed(&self) -> bool;
    /// An xDS response was replaced by a newer one before it was applied;
    /// whether to log it (not more than once in 10 s).
    fn xds_coalesced(&self) -> bool;
}

/// One generation of rules.
#[derive(Debug, Default)]
pub struct Loaded {
    /// 1 for the rules loaded at startup, then +1 per reload that changed them.
    pub generation: u64,
    pub rules: Rules,
}

/// What `/readyz` says about the config.
#[derive(Debug, Clone)]
pub struct ConfigStatus {
    pub generation: u64,
    pub last_error: Option<String>,
    /// The xDS version in force, when rules come from xDS.
    pub version: Option<String>,
}

/// The outcome of a reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// New rules are live.
    Swapped {
        generation: u64,
        /// Domains with their rule counts, sorted.
        domains: Vec<(String, usize)>,
        /// What changed, for the log line and `/reload`.
        changes: String,
    },
    /// The files hold what is already live: nothing to do.
    Unchanged { generation: u64 },
}

/// The live rules and how to load them again.
#[derive(Debug)]
pub struct LiveRules {
    current: ArcSwap<Loaded>,
    /// The directory's metadata fingerprint taken before the last load, so a
    /// poll can tell whether anything changed since.
    stat_seen: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Serialises reloads so two can never race to swap, and keeps the
    /// outcome of the last one for the callers it also answers.
    reload_lock: Mutex<Option<Result<Reload, LoadError>>>,
    /// Reloads started so far: a caller that finds one started after it
    /// arrived takes that one's outcome instead of running its own.
    started: AtomicU64,
    dir: PathBuf,
    /// The xDS management server when rules come from xDS, not files.
    xds: Option<String>,
    /// The xDS version of the rules in force.
    version: Mutex<Option<String>>,
    opts: LoadOptions,
    observer: Arc<dyn RulesObserver>,
}

impl LiveRules {
    /// Loads `dir` for the first time; an error here means sluice must not start.
    pub fn load(
        dir: &Path,
        opts: LoadOptions,
        observer: Arc<dyn RulesObserver>,
    ) -> Result<LiveRules, LoadError> {
        let stat = stat_fingerprint(dir, opts.max_files);
        let rules = load_dir(dir, opts, &*observer).inspect_err(|_| observer.loaded(Err(())))?;
        observer.loaded(Ok(1));
        Ok(LiveRules {
            current: ArcSwap::from_pointee(Loaded {
                generation: 1,
                rules,
            }),
            stat_seen: AtomicU64::new(stat),
            last_error: Mutex::new(None),
            reload_lock: Mutex::new(None),
            started: AtomicU64::new(0),
            dir: dir.to_path_buf(),
            xds: None,
            version: Mutex::new(None),
            opts,
            observer,
        })
    }

    /// Rules that will come from the xDS server `server`: none until its
    /// first good response (every domain is unknown, so everything is OK).
    pub fn for_xds(server: &str, opts: LoadOptions, observer: Arc<dyn RulesObserver>) -> LiveRules {
        LiveRules {
            current: ArcSwap::from_pointee(Loaded::default()),
            stat_seen: AtomicU64::new(0),
            last_error: Mutex::new(Some("waiting for the first xDS response".into())),
            reload_lock: Mutex::new(None),
            started: AtomicU64::new(0),
            dir: PathBuf::new(),
            xds: Some(server.to_owned()),
            version: Mutex::new(None),
            opts,
            observer,
        }
    }

    /// Records that the xDS stream failed (shown in `/readyz` until the next
    /// good response); the rules in force stay.
    pub fn xds_failed(&self, error: &str) {
        *self.last_error.lock() = Some(format!(
            "xDS stream failed: {error}; the rules in force stay, reconnecting"
        ));
    }

    /// The xDS server, when rules come from xDS.
    pub fn xds_server(&self) -> Option<&str> {
        self.xds.as_deref()
    }

    /// Installs rules that came over xDS with `version`; on an error the
    /// rules in force stay, as for a file reload.
    pub fn apply_xds(
        &self,
        result: Result<Rules, LoadError>,
        version: &str,
    ) -> Result<Reload, LoadError> {
        let _serial = self.reload_lock.lock();
        let outcome = self.install(result, "xDS");
        if outcome.is_ok() {
            *self.version.lock() = Some(version.to_owned());
        }
        outcome
    }

    /// The rules in force, for a short look (no `.await` while holding it).
    pub fn current(&self) -> arc_swap::Guard<Arc<Loaded>> {
        self.current.load()
    }

    /// The rules in force, to keep across `.await` points: one atomic
    /// increment, no lock.
    pub fn snapshot(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Who hears how the rules load, and hands them their counters.
    pub fn observer(&self) -> &dyn RulesObserver {
        &*self.observer
    }

    /// The options the rules are loaded with.
    pub fn options(&self) -> LoadOptions {
        self.opts
    }

    /// Loads the directory again and swaps the result in. On any error the
    /// previous rules stay in force, the error is kept for `/readyz`, counted,
    /// and logged once (a repeat of the same error is not logged again).
    ///
    /// Callers that arrive while a reload runs share the next one: forty
    /// `POST /reload` at once cost two loads, not forty.
    /// Blocking (file I/O): call it from a blocking thread. `cause` is for the log.
    pub fn reload(&self, cause: &str) -> Result<Reload, LoadError> {
        if self.xds.is_some() {
            // Nothing to read: xDS pushes.
            return Ok(Reload::Unchanged {
                generation: self.current.load().generation,
            });
        }
        let arrived = self.started.load(Ordering::Acquire);
        let mut last = self.reload_lock.lock();
        if self.started.load(Ordering::Acquire) > arrived
            && let Some(outcome) = last.as_ref()
        {
            // A reload that started after this caller arrived has finished:
            // it read the directory as this caller wants it read.
            return outcome.clone();
        }
        self.started.fetch_add(1, Ordering::AcqRel);
        let outcome = self.reload_now(cause);
        *last = Some(outcome.clone());
        outcome
    }

    fn reload_now(&self, cause: &str) -> Result<Reload, LoadError> {
        self.stat_seen.store(
            stat_fingerprint(&self.dir, self.opts.max_files),
            Ordering::Relaxed,
        );
        self.install(load_dir(&self.dir, self.opts, &*self.observer), cause)
    }

    /// Swaps in `result`'s rules, or keeps the rules in force and records the
    /// error (logged once, counted).
    fn install(&self, result: Result<Rules, LoadError>, cause: &str) -> Result<Reload, LoadError> {
        let previous = self.current.load_full();
        let rules = match result {
            Ok(rules) => rules,
            Err(e) => {
                let text = e.to_string();
                let mut last = self.last_error.lock();
                if last.as_deref() != Some(text.as_str()) {
                    self.observer.loaded(Err(()));
                    let keep = match e {
                        LoadError::Empty(_) | LoadError::Directory(..) => {
                            "the directory is missing or empty"
                        }
                        LoadError::Invalid(_) => "the new rules are invalid",
                    };
                    error!(
                        cause,
                        generation = previous.generation,
                        error = %text,
                        "config reload rejected ({keep}); generation {} stays in force",
                        previous.generation
                    );
                }
                *last = Some(text);
                return Err(e);
            }
        };
        self.last_error.lock().take();
        if rules.fingerprint() == previous.rules.fingerprint() {
            debug!(cause, generation = previous.generation, "config unchanged");
            return Ok(Reload::Unchanged {
                generation: previous.generation,
            });
        }
        let generation = previous.generation + 1;
        let domains = rules.summary();
        let changes = describe_changes(&previous.rules.summary(), &domains);
        self.current.store(Arc::new(Loaded { generation, rules }));
        self.observer.loaded(Ok(generation));
        info!(cause, generation, changes = %changes, "config generation {generation} is live");
        Ok(Reload::Swapped {
            generation,
            domains,
            changes,
        })
    }

    /// The metadata fingerprint of the directory when it was last loaded.
    pub fn stat_seen(&self) -> u64 {
        self.stat_seen.load(Ordering::Relaxed)
    }

    pub fn status(&self) -> ConfigStatus {
        ConfigStatus {
            generation: self.current.load().generation,
            last_error: self.last_error.lock().clone(),
            version: self.version.lock().clone(),
        }
    }
}

/// `api 7 rules (was 6), +shop 2 rules, -old`: domains added, removed, or whose
/// rule count changed; "rules edited" when only the rules' contents did.
fn describe_changes(before: &[(String, usize)], after: &[(String, usize)]) -> String {
    let mut parts = Vec::new();
    for (d, n) in after {
        match before.iter().find(|(b, _)| b == d) {
            None => parts.push(format!("+{d} {n} rules")),
            Some((_, was)) if was != n => parts.push(format!("{d} {n} rules (was {was})")),
            Some(_) => {}
        }
    }
    for (d, _) in before {
        if !after.iter().any(|(a, _)| a == d) {
            parts.push(format!("-{d}"));
        }
    }
    if parts.is_empty() {
        let all: Vec<String> = after
            .iter()
            .map(|(d, n)| format!("{d} {n} rules"))
            .collect();
        format!("rules edited; {}", all.join(", "))
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_added_removed_and_resized_domains() {
        let before = [("api".to_owned(), 6), ("old".to_owned(), 1)];
        let after = [("api".to_owned(), 7), ("shop".to_owned(), 2)];
        assert_eq!(
            describe_changes(&before, &after),
            "api 7 rules (was 6), +shop 2 rules, -old"
        );
        assert_eq!(
            describe_changes(&after, &after),
            "rules edited; api 7 rules, shop 2 rules"
        );
    }
}
