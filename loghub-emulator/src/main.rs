//! `loghub-emulator [--bind ADDR] [--access-key-id ID --access-key-secret SECRET]`: the LogHub
//! emulator as a process. Prints `loghub-emulator listening on http://ADDR` once it accepts
//! connections; exits 0 on SIGTERM or SIGINT, 1 with one line on stderr when it cannot start.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use shardlease_loghub_emulator::Emulator;

const USAGE: &str =
    "usage: loghub-emulator [--bind ADDR] [--access-key-id ID --access-key-secret SECRET]

  --bind ADDR              the address to listen on (default 127.0.0.1:4580)
  --access-key-id ID       check every signature against this access key...
  --access-key-secret S    ...and this secret (both or neither)

Clients reach it as their HTTP proxy (http_proxy=http://ADDR, no_proxy=127.0.0.1,localhost)
with any endpoint name; the control API is under http://ADDR/_emulator/.";

/// The default address: loopback only, never every interface unless asked.
const DEFAULT_BIND: &str = "127.0.0.1:4580";

struct Args {
    bind: String,
    key: Option<(String, String)>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let (mut bind, mut id, mut secret) = (DEFAULT_BIND.to_string(), None, None);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--bind" => bind = value("--bind")?,
            "--access-key-id" => id = Some(value("--access-key-id")?),
            "--access-key-secret" => secret = Some(value("--access-key-secret")?),
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    let key = match (id, secret) {
        (Some(id), Some(secret)) => Some((id, secret)),
        (None, None) => None,
        _ => return Err("--access-key-id and --access-key-secret go together".into()),
    };
    Ok(Some(Args { bind, key }))
}

async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // Without signal handlers the default action ends the process on either signal.
        _ => std::future::pending().await,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("loghub-emulator: {e}");
            return ExitCode::from(2);
        }
    };
    let mut emulator = Emulator::new();
    if let Some((id, secret)) = args.key {
        emulator = emulator.access_key(id, secret);
    }
    let running = match emulator.listen(args.bind.as_str()).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("loghub-emulator: cannot listen on {}: {e}", args.bind);
            return ExitCode::FAILURE;
        }
    };
    println!("loghub-emulator listening on {}", running.url());
    terminated().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}
