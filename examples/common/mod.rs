//! What every example does the same way: a tracing subscriber that honours `RUST_LOG`, errors
//! printed as one line a person can act on, and a graceful exit on SIGTERM as well as Ctrl-C.

// Each example uses the part it needs.
#![allow(dead_code)]

use std::error::Error as StdError;
use std::process::ExitCode;

/// The error type of the examples' `run` functions.
pub type Error = Box<dyn StdError + Send + Sync>;

/// Installs a tracing subscriber writing to stderr: the filter in `RUST_LOG` when set (for
/// example `RUST_LOG=shardlease=debug`), otherwise `default` (`"info"`, `"warn"`). Without
/// it the library's warnings (refused writes, failed renewals, a stream it cannot list) are
/// invisible.
pub fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// An error and its causes on one line, `outer: inner: innermost`: the sentence a person
/// acts on, where `{:?}` would print a page of nested structs.
pub fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The exit status of `main`: success, or the error's chain on stderr and failure.
pub fn exit(result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", chain(&*err));
            ExitCode::FAILURE
        }
    }
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM (what `docker stop`, Kubernetes and systemd send)
/// and returns the signal's name: either one is a request to leave gracefully.
#[cfg(unix)]
pub async fn shutdown_signal() -> std::io::Result<&'static str> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.map(|()| "SIGINT"),
        _ = term.recv() => Ok("SIGTERM"),
    }
}

/// Waits for Ctrl-C: there is no SIGTERM here.
#[cfg(not(unix))]
pub async fn shutdown_signal() -> std::io::Result<&'static str> {
    tokio::signal::ctrl_c().await.map(|()| "Ctrl-C")
}

/// Why a worker fails its health probe: the leases it holds that nobody processes (with the
/// reason: `Halted` is a shard its processor stopped on a batch it cannot get past), or that
/// it stopped.
pub fn unhealthy(monitor: &shardlease::worker::WorkerMonitor) -> String {
    let stalled = monitor.stalled_leases();
    if stalled.is_empty() {
        return "unhealthy: the worker stopped\n".into();
    }
    let leases: Vec<String> = stalled
        .iter()
        .map(|(key, why)| format!("{key} ({why:?})"))
        .collect();
    format!("unhealthy: stalled leases: {}\n", leases.join(", "))
}
