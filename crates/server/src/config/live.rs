//! The rules in force, swapped whole on every successful load: a request reads
//! one snapshot without taking a lock and sees either the old rules or the new
//! ones, never a mix.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tracing::{debug, error, info, warn};

use super::{
    DomainFile, LoadError, LoadOptions, Overlay, Parsed, Rules, compile_files, load_dir,
    stat_fingerprint,
};
use crate::rule_stats::RuleCounters;

mod retire;
pub use retire::after_freeing;
pub(crate) use retire::retired;

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
    /// The last xDS push as the control plane sent it, before any overlay,
    /// and its fingerprint: an overlay reload compiles it again.
    pushed: Mutex<Option<Parsed>>,
    /// `--xds-overlay`'s shapes (read from `dir`), and the warnings its last
    /// application gave (logged when they change).
    overlay: Mutex<Option<Arc<Overlay>>>,
    overlay_warnings: Mutex<Vec<String>>,
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
            pushed: Mutex::new(None),
            overlay: Mutex::new(None),
            overlay_warnings: Mutex::new(Vec::new()),
            opts,
            observer,
        })
    }

    /// Rules that will come from the xDS server `server`: none until its
    /// first good response (every domain is unknown, so everything is OK).
    /// With `overlay`, the shapes in that directory are read now (an error
    /// means sluice must not start) and again on every reload.
    pub fn for_xds(
        server: &str,
        overlay: Option<&Path>,
        opts: LoadOptions,
        observer: Arc<dyn RulesObserver>,
    ) -> Result<LiveRules, LoadError> {
        let shapes = overlay
            .map(|dir| Overlay::load(dir, opts.max_files))
            .transpose()?;
        let dir = overlay.map(Path::to_path_buf).unwrap_or_default();
        Ok(LiveRules {
            current: ArcSwap::from_pointee(Loaded::default()),
            stat_seen: AtomicU64::new(stat_fingerprint(&dir, opts.max_files)),
            last_error: Mutex::new(Some("waiting for the first xDS response".into())),
            reload_lock: Mutex::new(None),
            started: AtomicU64::new(0),
            dir,
            xds: Some(server.to_owned()),
            version: Mutex::new(None),
            pushed: Mutex::new(None),
            overlay: Mutex::new(shapes.map(Arc::new)),
            overlay_warnings: Mutex::new(Vec::new()),
            opts,
            observer,
        })
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

    /// Installs rules that came over xDS with `version` (the configs as
    /// pushed and their fingerprint), shaped by the overlay; on an error the
    /// rules in force stay, as for a file reload.
    pub fn apply_xds(
        &self,
        pushed: Result<Parsed, LoadError>,
        version: &str,
    ) -> Result<Reload, LoadError> {
        let _serial = self.reload_lock.lock();
        // Only a push that compiles is kept for an overlay reload: one that
        // was refused (NACKed) is never put in force by a later edit.
        let result = pushed.and_then(|(files, hash)| {
            let rules = self.compile_pushed(files.clone(), hash)?;
            *self.pushed.lock() = Some((files, hash));
            Ok(rules)
        });
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
            return self.reload_overlay(cause);
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

    /// Under xDS the only thing to read is the overlay: read it again and
    /// shape the last push with it.
    fn reload_overlay(&self, cause: &str) -> Result<Reload, LoadError> {
        let unchanged = || Reload::Unchanged {
            generation: self.current.load().generation,
        };
        if self.dir.as_os_str().is_empty() {
            return Ok(unchanged());
        }
        let _serial = self.reload_lock.lock();
        let stat = stat_fingerprint(&self.dir, self.opts.max_files);
        self.stat_seen.store(stat, Ordering::Relaxed);
        let overlay = match Overlay::load(&self.dir, self.opts.max_files) {
            Ok(o) => Arc::new(o),
            Err(e) => return self.install(Err(e), cause),
        };
        *self.overlay.lock() = Some(overlay);
        let pushed = self.pushed.lock().clone();
        match pushed {
            Some((files, hash)) => self.install(self.compile_pushed(files, hash), cause),
            None => Ok(unchanged()),
        }
    }

    /// The pushed configs with the overlay's shapes, compiled.
    fn compile_pushed(
        &self,
        mut files: Vec<(PathBuf, DomainFile)>,
        hash: u64,
    ) -> Result<Rules, LoadError> {
        let overlay = self.overlay.lock().clone();
        let Some(overlay) = overlay else {
            return compile_files(files, self.opts, &*self.observer, hash);
        };
        let warnings = overlay.apply(&mut files)?;
        let mut seen = self.overlay_warnings.lock();
        if *seen != warnings {
            for w in &warnings {
                warn!("--xds-overlay: {w}");
            }
            *seen = warnings;
        }
        let fingerprint = hash.rotate_left(1) ^ overlay.fingerprint();
        compile_files(files, self.opts, &*self.observer, fingerprint)
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
        drop(self.current.swap(Arc::new(Loaded { generation, rules })));
        // Freed off the request path once no request holds it.
        retire::retire(previous);
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

mod changes;
use changes::describe_changes;
