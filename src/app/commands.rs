//! The commands besides `serve`: `check`, `bench` and `health`.

use std::io::Write as _;
use std::process::ExitCode;

use super::{AppError, Context as _};
use crate::cli::{BenchArgs, CheckArgs, HealthArgs};
use crate::config::load_dir;
use crate::health_probe;
use crate::rule_stats::Detached;

pub fn check(args: &CheckArgs) -> Result<ExitCode, AppError> {
    match load_dir(&args.dir, args.config_args.load_options(), &Detached) {
        Ok(rules) => {
            for (domain, count) in rules.summary() {
                println!("{domain}: {count} rules");
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
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
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
