//! The commands besides `serve`: `check`, `bench`, `health` and `counters`.

use std::io::Write as _;
use std::process::ExitCode;

use super::{AppError, Context as _};
use crate::cli::{
    AdminClient, AdviseArgs, BenchArgs, CheckArgs, CountersAction, CountersArgs, HealthArgs,
};
use crate::config::load_dir;
use crate::counters::client;
use crate::health_probe;
use crate::rule_stats::Detached;

pub fn check(args: &CheckArgs) -> Result<ExitCode, AppError> {
    let Some(rules) = check_load(args) else {
        return Ok(ExitCode::FAILURE);
    };
    let code = report(&rules, args);
    // The process ends next: freeing a million rules one allocation at a
    // time would add most of a second to every CI run for nothing.
    std::mem::forget(rules);
    Ok(code)
}

/// What `check` prints about rules that loaded, and its exit code.
fn report(rules: &crate::config::Rules, args: &CheckArgs) -> ExitCode {
    if !args.envoy.is_empty() {
        return check_envoy(rules, args);
    }
    for (domain, count) in rules.summary() {
        println!("{domain}: {count} rules");
    }
    // Said on stderr, as the quota warnings: stdout stays the summary.
    for (domain, count) in rules.counted_after() {
        eprintln!(
            "note: {domain}: {count} rules count after (count_after): each instance answers a key from its credit and counts it in the store after, so a key may pass its limit by up to instances x credit a window"
        );
    }
    if args.rules {
        for line in rules.dump() {
            println!("  {line}");
        }
    }
    let ambiguous = rules.quota_ambiguities();
    let kind = if args.quota { "error" } else { "warning" };
    for line in &ambiguous {
        eprintln!("{kind}: quota mode: {line}");
    }
    if args.quota && !ambiguous.is_empty() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The directory's rules, shaped by `--xds-overlay` when given (its
/// warnings printed); `None` when they do not load (the errors printed).
fn check_load(args: &CheckArgs) -> Option<crate::config::Rules> {
    let opts = args.config_args.load_options();
    let loaded = match &args.xds_overlay {
        None => load_dir(&args.dir, opts, &Detached),
        Some(dir) => crate::config::Overlay::load(dir, opts.max_files)
            .and_then(|o| crate::config::load_dir_shaped(&args.dir, opts, &Detached, &o))
            .map(|(rules, warnings)| {
                for w in warnings {
                    eprintln!("warning: --xds-overlay: {w}");
                }
                rules
            }),
    };
    loaded.inspect_err(|e| eprintln!("{e}")).ok()
}

/// `check --envoy`: 1 on errors, 0 with warnings only, 2 when a file
/// cannot be read.
fn check_envoy(rules: &crate::config::Rules, args: &CheckArgs) -> ExitCode {
    match crate::envoy_check::check(rules, &args.envoy, args.envoy_version) {
        Ok(report) => {
            let out = if args.json {
                format!("{:#}\n", crate::envoy_check::json(&report))
            } else {
                crate::envoy_check::text(&report)
            };
            let _ = std::io::stdout().write_all(out.as_bytes());
            if report.failed() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("sluice check: {e}");
            ExitCode::from(2)
        }
    }
}

/// `--samples`: one `due_us latency_us` line per request.
fn write_samples(
    path: &std::path::Path,
    samples: &[crate::loadgen::Sample],
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for s in samples {
        writeln!(out, "{} {}", s.due_us, s.latency_us)?;
    }
    out.flush()
}

pub fn bench(args: BenchArgs) -> Result<ExitCode, AppError> {
    let plan = crate::loadgen::LoadPlan {
        target: args.target,
        domain: args.domain,
        descriptors: args.descriptors,
        keys: args.keys,
        concurrency: args.concurrency,
        connections: args.connections,
        duration: args.duration,
        requests: args.requests,
        rate: args.rate,
    };
    // One client thread: on a small machine shared with the server, more
    // client threads mostly steal the server's cores and add jitter.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(crate::loadgen::run(plan))?;
    if let Some(path) = &args.samples {
        write_samples(path, report.samples())
            .with_context(|| format!("writing samples to {}", path.display()))?;
    }
    let text = if args.json {
        report.json()
    } else {
        report.to_string()
    };
    // A reader that went away (`| head -1`) is not an error worth a panic.
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("writing the report")
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

pub fn health(args: &HealthArgs) -> Result<ExitCode, AppError> {
    let addr = args
        .admin_addr
        .first()
        .copied()
        .context("--admin-addr: no address")?;
    match health_probe::check(health_probe::local(addr), "/healthcheck", args.timeout) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(why) => {
            eprintln!("sluice health: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `sluice counters show|reset|top`: exit 0 on an answer, 1 when sluice
/// refused the call (its words on stderr).
pub fn counters(args: &CountersArgs) -> Result<ExitCode, AppError> {
    let token = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--token-file {}", path.display()))?
                .trim()
                .to_owned(),
        ),
        None => std::env::var("SLUICE_ADMIN_TOKEN").ok(),
    };
    let (method, path, body) = match &args.action {
        CountersAction::Show(t) => ("POST", "/api/counters", Some(t)),
        CountersAction::Reset(t) => ("POST", "/api/counters/reset", Some(t)),
        CountersAction::Top => ("GET", "/api/counters/top", None),
    };
    let body = body
        .map(|t| client::body(&t.domain, &t.descriptors))
        .transpose()
        .map_err(AppError::msg)?;
    let table = |doc: &serde_json::Value| match args.action {
        CountersAction::Top => client::top_table(doc),
        _ => client::table(doc),
    };
    let call = AdminCall {
        name: "counters",
        client: &args.client,
        method,
        path,
        token: token.as_deref(),
    };
    call.print(body.as_ref(), table)
}

/// One call to a running sluice's admin port, its JSON answer printed as
/// `table` makes it (or as it came, `--json`): exit 0 on 200, 1 with
/// sluice's words on stderr otherwise.
struct AdminCall<'a> {
    name: &'a str,
    client: &'a AdminClient,
    method: &'a str,
    path: &'a str,
    token: Option<&'a str>,
}

impl AdminCall<'_> {
    fn print(
        &self,
        body: Option<&serde_json::Value>,
        table: impl Fn(&serde_json::Value) -> String,
    ) -> Result<ExitCode, AppError> {
        let answer = client::call(
            &self.client.admin,
            self.method,
            self.path,
            self.token,
            body,
            self.client.timeout,
        )
        .map_err(AppError::msg)?;
        if answer.status != 200 {
            eprintln!(
                "sluice {}: {} {}",
                self.name,
                answer.status,
                answer.body.trim()
            );
            return Ok(ExitCode::FAILURE);
        }
        let doc: serde_json::Value =
            serde_json::from_str(&answer.body).context("the answer is not JSON")?;
        let text = if self.client.json {
            format!("{doc:#}\n")
        } else {
            table(&doc)
        };
        let _ = std::io::stdout().write_all(text.as_bytes());
        Ok(ExitCode::SUCCESS)
    }
}

/// `sluice advise`: the usage of every rule as a table, summed over the
/// instances asked (`--admin` and each `--also`).
pub fn advise(args: &AdviseArgs) -> Result<ExitCode, AppError> {
    let path = match &args.domain {
        Some(d) => format!("/api/usage?domain={d}"),
        None => "/api/usage".to_owned(),
    };
    let mut docs = Vec::new();
    for admin in std::iter::once(&args.client.admin).chain(&args.also) {
        let answer = client::call(admin, "GET", &path, None, None, args.client.timeout)
            .map_err(|e| AppError::msg(format!("{admin}: {e}")))?;
        if answer.status != 200 {
            eprintln!(
                "sluice advise: {admin}: {} {}",
                answer.status,
                answer.body.trim()
            );
            return Ok(ExitCode::FAILURE);
        }
        let doc: serde_json::Value = serde_json::from_str(&answer.body)
            .with_context(|| format!("{admin}: the answer is not JSON"))?;
        docs.push(doc);
    }
    let fleet = crate::usage::fleet::merge(&docs);
    let text = if args.client.json {
        format!("{fleet:#}\n")
    } else {
        crate::usage::advice_table(&fleet)
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(ExitCode::SUCCESS)
}
