//! The rules in force, swapped whole on every successful load: a request reads
//! one snapshot without taking a lock and sees either the old rules or the new
//! ones, never a mix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::{LoadError, LoadOptions, Rules, load_dir};
use crate::metrics::Metrics;

/// One generation of rules.
#[derive(Debug, Default)]
pub struct Loaded {
    /// 1 for the rules loaded at startup, then +1 per successful reload.
    pub generation: u64,
    pub rules: Rules,
}

/// What `/readyz` says about the config.
#[derive(Debug, Clone)]
pub struct ConfigStatus {
    pub generation: u64,
    pub last_error: Option<String>,
}

/// The live rules and how to load them again.
#[derive(Debug)]
pub struct LiveRules {
    current: ArcSwap<Loaded>,
    last_error: Mutex<Option<String>>,
    /// Serialises reloads so two can never race to swap.
    reload_lock: Mutex<()>,
    dir: PathBuf,
    opts: LoadOptions,
    metrics: Arc<Metrics>,
}

/// The outcome of a successful reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    pub generation: u64,
    /// Domains with their rule counts, sorted.
    pub domains: Vec<(String, usize)>,
    /// Domains and rule counts before, for the log line.
    pub previous: Vec<(String, usize)>,
}

impl LiveRules {
    /// Loads `dir` for the first time; an error here means sluice must not start.
    pub fn load(
        dir: &Path,
        opts: LoadOptions,
        metrics: Arc<Metrics>,
    ) -> Result<LiveRules, LoadError> {
        let rules = load_dir(dir, opts, &metrics).inspect_err(|_| metrics.config_load(Err(())))?;
        metrics.config_load(Ok(1));
        Ok(LiveRules {
            current: ArcSwap::from_pointee(Loaded {
                generation: 1,
                rules,
            }),
            last_error: Mutex::new(None),
            reload_lock: Mutex::new(()),
            dir: dir.to_path_buf(),
            opts,
            metrics,
        })
    }

    /// The rules in force.
    pub fn current(&self) -> arc_swap::Guard<Arc<Loaded>> {
        self.current.load()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Loads the directory again and swaps the result in; on any error the
    /// previous rules stay in force and the error is kept for `/readyz`.
    /// Blocking (file I/O): call it from a blocking thread.
    pub fn reload(&self) -> Result<Reloaded, LoadError> {
        let _serial = self.reload_lock.lock();
        let previous = self.current.load_full();
        match load_dir(&self.dir, self.opts, &self.metrics) {
            Ok(rules) => {
                let generation = previous.generation + 1;
                let domains = rules.summary();
                self.current.store(Arc::new(Loaded { generation, rules }));
                *self.last_error.lock() = None;
                self.metrics.config_load(Ok(generation));
                Ok(Reloaded {
                    generation,
                    domains,
                    previous: previous.rules.summary(),
                })
            }
            Err(e) => {
                *self.last_error.lock() = Some(e.to_string());
                self.metrics.config_load(Err(()));
                Err(e)
            }
        }
    }

    pub fn status(&self) -> ConfigStatus {
        ConfigStatus {
            generation: self.current.load().generation,
            last_error: self.last_error.lock().clone(),
        }
    }
}
