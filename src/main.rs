//! The `sluice` binary: parse the command line, run the command, exit.
//! Everything it runs lives in the library: [`sluice::cli`] (the flags) and
//! [`sluice::app`] (the composition root).

use std::ffi::OsStr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use sluice::app;
use sluice::cli::{Cli, Command};
use sluice::reference_env;

// mimalloc: a request makes a few dozen small allocations in h2, hyper and
// tonic; see the README's Performance section for what it gained.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's own collect: frees what it holds for later use and purges
// what is pending, now (the `mimalloc` crate links it; its "extended"
// feature would only declare this).
unsafe extern "C" {
    fn mi_collect(force: bool);
}

/// Run after a reload's replaced rules are freed: without it, mimalloc
/// kept their pages resident in a process that then allocated nothing
/// (a million rules: 0.96 to 1.21 GB after a reload against 0.65 before).
fn purge_freed_rules() {
    // SAFETY: mi_collect takes no pointers and may be called from any
    // thread at any time; it only returns memory mimalloc no longer uses.
    unsafe { mi_collect(true) }
}

fn main() -> ExitCode {
    sluice_server::config::after_freeing(purge_freed_rules);
    // Started as the reference is (`/bin/ratelimit` in the image, Envoy
    // Gateway's command): its environment decides, not sluice's flags.
    let invoked = std::env::args_os().next().unwrap_or_default();
    let as_ratelimit = Path::new(&invoked).file_name() == Some(OsStr::new("ratelimit"));
    if as_ratelimit && std::env::args_os().len() == 1 {
        return finish(ratelimit());
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Check(args)) => app::check(&args),
        Some(Command::Serve(args)) => app::serve(*args, &[]),
        Some(Command::Bench(args)) => app::bench(args),
        Some(Command::Health(args)) => app::health(&args),
        Some(Command::Ratelimit) => return finish(ratelimit()),
        Some(Command::Counters(args)) => app::counters(&args),
        Some(Command::Advise(args)) => app::advise(&args),
        None => app::serve(cli.serve, &[]),
    };
    finish(result.map_err(anyhow::Error::from))
}

fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `ratelimit` mode: the reference's environment as sluice's flags.
fn ratelimit() -> anyhow::Result<ExitCode> {
    let t = reference_env::translate(std::env::vars()).context("ratelimit mode")?;
    for (k, v) in &t.env {
        // SAFETY: nothing else runs yet: the runtime and its threads start
        // in serve, after this.
        unsafe { std::env::set_var(k, v) };
    }
    let args = std::iter::once("sluice".to_owned()).chain(t.args);
    let cli = Cli::try_parse_from(args).context("ratelimit mode: the translated flags")?;
    match cli.command {
        Some(Command::Serve(args)) => Ok(app::serve(*args, &t.notes)?),
        _ => anyhow::bail!("ratelimit mode: the translation is not a serve command"),
    }
}
