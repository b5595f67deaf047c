//! Rules: the YAML model, its validation, the compiled matcher, and loading a
//! whole directory into one immutable snapshot. `sluice check`, startup and
//! reloads all go through [`load_dir`], so `check` accepts exactly what the
//! server would.

mod bucket;
mod error;
mod explain;
mod live;
mod matcher;
mod model;
mod overlay;
mod walk;
pub mod watch;
pub mod xds;
pub(crate) mod yaml;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use bucket::{BucketMatch, MAX_BUCKET_ENTRIES};
pub use error::{ConfigError, LoadError};
pub use explain::{Explanation, How, Reach, Shape, Step};
pub use live::after_freeing;
pub(crate) use live::retired;
pub use live::{ConfigStatus, LiveRules, Loaded, Reload, RulesObserver};
pub(crate) use matcher::FastMap;
pub use matcher::{Domain, Match, Rule};
pub use model::{
    DescriptorDef, DomainFile, LimitDef, Origin, RateLimitDef, parse_documents, parse_file,
};
pub use overlay::Overlay;

use crate::limiter::{Algorithm, Period};
use crate::rule_stats::RuleCounters;

pub use walk::stat_fingerprint;
pub use yaml::FileBounds;

/// Settings that change how a directory is read.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Allow one domain to be spread over several files.
    pub merge_domains: bool,
    /// The most rule files one load reads (`--max-rule-files`).
    pub max_files: usize,
    /// The store can hold leases (`algorithm: concurrency`): every store
    /// but memcached.
    pub leases: bool,
    /// `unit: month` fixed windows are UTC calendar months
    /// (`--calendar-months`), not 30 days from the epoch.
    pub calendar_months: bool,
    /// Bounds on each file (`--max-rule-file-bytes`, `--max-rule-file-nodes`).
    pub file_bounds: FileBounds,
    /// The nice value reloads compile at (`--reload-nice`, 0 to 19, or 20
    /// for SCHED_IDLE): above 0 they take the CPU requests leave idle.
    pub reload_nice: u8,
    /// `--count-after`: rules that do not say count after.
    pub count_after: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            merge_domains: false,
            max_files: 1000,
            leases: true,
            calendar_months: false,
            file_bounds: FileBounds::default(),
            reload_nice: 10,
            count_after: false,
        }
    }
}

/// One load's rules, immutable once built.
#[derive(Debug, Default)]
pub struct Rules {
    domains: matcher::FastMap<Arc<str>, Domain>,
    /// A hash of every file's path and content: equal fingerprints mean a
    /// reload would change nothing.
    fingerprint: u64,
}

impl Rules {
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Domains, sorted by name.
    pub fn domains(&self) -> Vec<(&str, &Domain)> {
        let mut out: Vec<_> = self.domains.iter().map(|(name, d)| (&**name, d)).collect();
        out.sort_unstable_by_key(|(name, _)| *name);
        out
    }

    /// Domains with their rule counts, sorted by name.
    pub fn summary(&self) -> Vec<(String, usize)> {
        self.domains()
            .into_iter()
            .map(|(name, d)| (name.to_owned(), d.rules().len()))
            .collect()
    }

    /// Every domain's quota-mode ambiguities ([`Domain::quota_ambiguities`]),
    /// as `domain 'name': ...` lines, sorted.
    pub fn quota_ambiguities(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .domains
            .iter()
            .flat_map(|(name, d)| {
                d.quota_ambiguities()
                    .into_iter()
                    .map(move |line| format!("domain '{name}': {line}"))
            })
            .collect();
        out.sort();
        out
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// One line per rule, sorted, in the reference's `/rlconfig` format.
    pub fn dump(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .domains
            .values()
            .flat_map(|d| d.rules())
            .map(|r| {
                let mut limit = describe_limit(&r.limit);
                // A rule's own failure policy, written only when it has one
                // so the reference's lines stay the reference's.
                if let Some(policy) = r.on_failure {
                    limit.push_str(&format!(" on_store_failure={}", policy.name()));
                }
                if r.count_after {
                    limit.push_str(" count_after=true");
                }
                format!(
                    "{}.{}: {limit}, shadow_mode: {}, quota_mode: {}",
                    r.domain, r.label, r.shadow_mode, r.quota_mode
                )
            })
            .collect();
        lines.sort();
        lines
    }
}

/// A rule's limit in the reference's `/rlconfig` words (`unit=minute
/// requests_per_unit=30`), with sluice's shape after them when it has one.
pub fn describe_limit(limit: &LimitDef) -> String {
    match *limit {
        LimitDef::Unlimited => "unlimited=true".to_owned(),
        LimitDef::Limited {
            period: Period::Unit(unit),
            requests_per_unit,
            algorithm: Algorithm::FixedWindow,
        } => format!("unit={unit} requests_per_unit={requests_per_unit}"),
        // The reference's words for its calendar months too.
        LimitDef::Limited {
            period: Period::CalendarMonth,
            requests_per_unit,
            algorithm: Algorithm::FixedWindow,
        } => format!("unit=MONTH requests_per_unit={requests_per_unit}"),
        LimitDef::Limited {
            period,
            requests_per_unit,
            algorithm,
        } => shaped(period, requests_per_unit, algorithm),
    }
}

/// A rule with a shape the reference has no words for: its window and
/// algorithm after the reference's fields.
fn shaped(period: Period, requests_per_unit: u32, algorithm: Algorithm) -> String {
    let window = match period {
        Period::Unit(u) => format!("unit={u}"),
        Period::Seconds(n) => format!("window={n}s"),
        Period::CalendarMonth => "unit=MONTH calendar".to_owned(),
    };
    let burst = match algorithm {
        Algorithm::TokenBucket { burst, .. } => format!(" burst={burst}"),
        _ => String::new(),
    };
    format!(
        "{window} requests_per_unit={requests_per_unit} algorithm={}{burst}",
        algorithm.name()
    )
}

/// Reads, validates and compiles every `*.yaml`/`*.yml` file under `dir`,
/// skipping dot-files and dot-directories (Kubernetes' `..data`). Either the
/// whole directory is valid or every error is returned.
pub fn load_dir(
    dir: &Path,
    opts: LoadOptions,
    counters: &dyn RuleCounters,
) -> Result<Rules, LoadError> {
    load_texts(read_dir(dir, opts)?, opts, counters)
}

/// Loads `dir` as rules pushed over xDS with `overlay`'s shapes on them:
/// what `sluice check --xds-overlay` checks. Also returns the overlay's
/// warnings (entries that meet no rule).
pub fn load_dir_shaped(
    dir: &Path,
    opts: LoadOptions,
    counters: &dyn RuleCounters,
    overlay: &Overlay,
) -> Result<(Rules, Vec<String>), LoadError> {
    let (mut files, hash) = parse_texts(read_dir(dir, opts)?, opts.file_bounds)?;
    let warnings = overlay.apply(&mut files)?;
    Ok((compile_files(files, opts, counters, hash)?, warnings))
}

/// The text of every rule file under `dir`.
fn read_dir(dir: &Path, opts: LoadOptions) -> Result<Vec<(PathBuf, String)>, LoadError> {
    let (texts, errors) = read_files(dir, opts.max_files)?;
    if texts.is_empty() && errors.is_empty() {
        return Err(LoadError::Empty(dir.to_path_buf()));
    }
    if errors.is_empty() {
        Ok(texts)
    } else {
        Err(LoadError::Invalid(errors))
    }
}

/// Files read (path and text), and those that could not be.
type Read = (Vec<(PathBuf, String)>, Vec<ConfigError>);

/// Every `*.yaml`/`*.yml` file under `dir` read, and the ones that could
/// not be (rule files and overlays are found alike).
fn read_files(dir: &Path, max_files: usize) -> Result<Read, LoadError> {
    let walk::Found { files, mut errors } = walk::find(dir, max_files)?;
    let mut texts = Vec::with_capacity(files.len());
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => texts.push((file, text)),
            Err(e) => errors.push(ConfigError {
                file,
                position: None,
                field: String::new(),
                message: format!("error loading config file: {e}"),
            }),
        }
    }
    Ok((texts, errors))
}

/// Validates and compiles rule files already read: `(path, text)` in the
/// order they were found. [`load_dir`] reads the files and calls this; the
/// config fuzzer calls it directly.
pub fn load_texts(
    texts: Vec<(PathBuf, String)>,
    opts: LoadOptions,
    counters: &dyn RuleCounters,
) -> Result<Rules, LoadError> {
    let (parsed, hash) = parse_texts(texts, opts.file_bounds)?;
    compile_files(parsed, opts, counters, hash)
}

/// Parsed rule files (or pushed configs), each with the file it came from,
/// and a fingerprint of their content.
pub type Parsed = (Vec<(PathBuf, DomainFile)>, u64);

/// Every document of every file in the model, with a fingerprint of the texts.
/// Files are parsed on as many threads as there are cores (one less on a
/// reload: [`crate::background::threads`]; a platform's per-customer rules
/// come in many files), and kept in the order found.
fn parse_texts(texts: Vec<(PathBuf, String)>, bounds: FileBounds) -> Result<Parsed, LoadError> {
    let mut hasher = DefaultHasher::new();
    for (file, text) in &texts {
        (file, text).hash(&mut hasher);
    }
    let threads = crate::background::threads().min(texts.len()).max(1);
    let parse = |(file, text): &(PathBuf, String)| parse_documents(file, text, bounds);
    let results: Vec<_> = if threads == 1 {
        texts.iter().map(parse).collect()
    } else {
        let per = texts.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let parts: Vec<_> = texts
                .chunks(per)
                .map(|part| scope.spawn(move || part.iter().map(parse).collect::<Vec<_>>()))
                .collect();
            parts
                .into_iter()
                // A parser that panicked panics here, as it would alone.
                .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    let mut parsed = Vec::with_capacity(texts.len());
    let mut errors = Vec::new();
    for ((file, _), result) in texts.iter().zip(results) {
        match result {
            Ok(docs) => parsed.extend(docs.into_iter().map(|df| (file.clone(), df))),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        Ok((parsed, hasher.finish()))
    } else {
        Err(LoadError::Invalid(errors))
    }
}

/// Compiles parsed domain files (from YAML or xDS) into rules;
/// `fingerprint` identifies their content, so an unchanged push is a no-op.
pub(crate) fn compile_files(
    parsed: Vec<(PathBuf, DomainFile)>,
    opts: LoadOptions,
    counters: &dyn RuleCounters,
    fingerprint: u64,
) -> Result<Rules, LoadError> {
    if !opts.leases {
        no_leases(&parsed)?;
    }
    let mut parsed = parsed;
    for (_, df) in &mut parsed {
        if opts.calendar_months {
            calendar_months(&mut df.descriptors);
        }
        if opts.count_after {
            model::after::by_default(&mut df.descriptors);
        }
    }
    let domains =
        matcher::compile(parsed, opts.merge_domains, counters).map_err(LoadError::Invalid)?;
    Ok(Rules {
        domains,
        fingerprint,
    })
}

/// `--calendar-months`: every fixed window of `unit: month` becomes a UTC
/// calendar month, as the reference's `USE_CALENDAR_MONTH_RATE_LIMIT` makes
/// it (other shapes keep 30 days: the reference has no others).
fn calendar_months(defs: &mut [Box<DescriptorDef>]) {
    for d in defs {
        for r in d.rate_limit.iter_mut().chain(d.rate_limits.iter_mut()) {
            if let LimitDef::Limited {
                period: period @ Period::Unit(crate::limiter::Unit::Month),
                algorithm: Algorithm::FixedWindow,
                ..
            } = &mut r.limit
            {
                *period = Period::CalendarMonth;
            }
        }
        calendar_months(&mut d.descriptors);
    }
}

/// Refuses concurrency rules on a store that cannot hold their leases.
fn no_leases(parsed: &[(PathBuf, DomainFile)]) -> Result<(), LoadError> {
    fn walk(file: &Path, defs: &[Box<DescriptorDef>], errors: &mut Vec<ConfigError>) {
        for d in defs {
            let concurrent = d.rate_limit.iter().chain(&d.rate_limits).any(|r| {
                matches!(
                    r.limit,
                    LimitDef::Limited {
                        algorithm: Algorithm::Concurrency,
                        ..
                    }
                )
            });
            if concurrent {
                errors.push(ConfigError {
                    file: file.to_path_buf(),
                    position: d.origin.position,
                    field: format!("{}.rate_limit.algorithm", d.origin.field),
                    message:
                        "algorithm: concurrency needs Redis or memory: memcached holds no leases"
                            .into(),
                });
            }
            walk(file, &d.descriptors, errors);
        }
    }
    let mut errors = Vec::new();
    for (file, df) in parsed {
        walk(file, &df.descriptors, &mut errors);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(LoadError::Invalid(errors))
    }
}

#[cfg(test)]
mod tests;
