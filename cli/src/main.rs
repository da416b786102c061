//! `shardlease`: look at and operate a lease table from the command line.
//!
//! ```text
//! cargo run -p shardlease-cli -- --help
//! shardlease --table orders status --watch
//! shardlease --table orders drain host-a
//! ```
//!
//! The table comes from `--table` (or `SHARDLEASE_TABLE`), the endpoint, region and
//! credentials from the standard AWS environment (`AWS_ENDPOINT_URL` or `--endpoint` for a
//! local emulator); with `--redis URL` (or `SHARDLEASE_REDIS`) the table is on that Redis
//! server instead, under `--key-prefix` (default `shardlease`), and `status`, `release`,
//! `drain`, `checkpoint` and `delete` work on it the same way. Every change goes through the workers' own conditional writes
//! (`shardlease::admin`): nothing is processed twice. Tables print for people; `--json` prints
//! one JSON document for scripts. Errors print one line and exit with status 1 (2 for a
//! command line that does not parse).

mod bench;
mod connect;
mod iam;
mod kcl;
mod redis_table;
mod status;
mod text;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::json;
use shardlease::admin::{Admin, DrainProgress, GivenBack};
use shardlease::lease::{Lease, LeaseKey, WorkerId};

use connect::Target;

/// Look at and operate a shardlease lease table.
#[derive(Parser, Debug)]
#[command(name = "shardlease", version, about, long_about = None)]
struct Cli {
    /// The lease table [env: SHARDLEASE_TABLE]
    #[arg(long, global = true, env = "SHARDLEASE_TABLE", hide_env = true)]
    table: Option<String>,
    /// The DynamoDB endpoint, for a local emulator [default: the AWS chain, or AWS_ENDPOINT_URL]
    #[arg(long, global = true, conflicts_with = "redis")]
    endpoint: Option<String>,
    /// The table is on this Redis server instead of DynamoDB:
    /// redis://[USER:PASSWORD@]HOST[:PORT][/DB] [env: SHARDLEASE_REDIS]
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "SHARDLEASE_REDIS",
        hide_env = true
    )]
    redis: Option<String>,
    /// The Redis key prefix the workers use (RedisConfig::key_prefix) [default: shardlease]
    #[arg(long, global = true, value_name = "PREFIX")]
    key_prefix: Option<String>,
    /// Print one JSON document instead of tables
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Workers (heartbeat, leases held, load, capacity) and leases (owner, tenure, counter,
    /// checkpoint, pending handoff, state)
    Status {
        /// Refresh in place until interrupted
        #[arg(long)]
        watch: bool,
        /// How often --watch reads the table
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        interval: Duration,
    },
    /// Move a lease off its owner gracefully: its application checkpoints and stops, then
    /// the lease goes to the fleet
    Release {
        /// The lease key
        key: String,
        /// How long to wait for the owner's application
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Ask a worker to leave the fleet gracefully (as on SIGTERM): its leases go to the others
    Drain {
        /// The worker id
        worker: String,
        /// How long to wait until it holds nothing and has left
        #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Write or reset a lease's checkpoint (only while nobody holds it, or --force)
    Checkpoint {
        #[command(subcommand)]
        action: CheckpointAction,
    },
    /// Delete a lease (only while nobody holds it, or --force). While the source lists its
    /// shard, the fleet creates it again from the last checkpoint a worker read; to start a
    /// lease over, use `checkpoint reset`
    Delete {
        /// The lease key
        key: String,
        /// Have its owner hand it over gracefully first
        #[arg(long)]
        force: bool,
        /// How long to wait for the owner's application with --force
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Create the lease table if it does not exist, and wait until it is ACTIVE
    CreateTable {
        /// Provisioned capacity as READ,WRITE units [default: on-demand]
        #[arg(long, value_name = "READ,WRITE")]
        provisioned: Option<String>,
    },
    /// The table as DynamoDB describes it, and what it holds
    DescribeTable,
    /// Print the least-privilege IAM policy for workers of this table (and stream)
    IamPolicy {
        /// A Kinesis stream the consumer reads, by name or ARN (again for each stream of a
        /// consumer of several)
        #[arg(long)]
        stream: Vec<String>,
        /// The consumer reads its streams with enhanced fan-out (its stream consumers' actions)
        #[arg(long, requires = "stream")]
        fan_out: bool,
        /// The consumer is a consumer of several streams (implied by more than one --stream)
        #[arg(long, requires = "stream")]
        multi_stream: bool,
        /// Also what `shardlease bench` needs, on the tables it makes (shardlease-bench-*)
        #[arg(long)]
        bench: bool,
        /// The AWS region of the resources [default: any]
        #[arg(long)]
        region: Option<String>,
        /// The AWS account id of the resources [default: any]
        #[arg(long)]
        account: Option<String>,
    },
    /// Measure the library on this DynamoDB endpoint: a small fleet in this process on a
    /// table made for the run (--table, or a fresh name) and deleted after it balances,
    /// rests, loses a worker to a crash and lets one leave; prints the failover, the handover,
    /// the items processed twice and the requests per lease-hour (docs/OPERATIONS.md)
    Bench {
        /// Workers in the fleet (at least 3: one crashes, one leaves)
        #[arg(long, default_value_t = 3)]
        workers: usize,
        /// Leases (at least one per worker)
        #[arg(long, default_value_t = 12)]
        leases: usize,
        /// The lease duration (WorkerConfig::lease_duration; the intervals follow it)
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lease: Duration,
        /// How long the balanced fleet rests while its requests are counted
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        rest: Duration,
        /// Keep the table after the run
        #[arg(long)]
        keep_table: bool,
    },
    /// Copy the checkpoints of a KCL 2.x/3.x lease table into a shardlease table (a dry run
    /// unless --apply)
    ImportKcl {
        /// The KCL lease table (read only)
        #[arg(long)]
        from: String,
        /// The shardlease table (created if missing; nothing in it is overwritten)
        #[arg(long)]
        to: String,
        /// Write (without it, only show what would be written)
        #[arg(long)]
        apply: bool,
    },
}

#[derive(Subcommand, Debug)]
enum CheckpointAction {
    /// Set the checkpoint the next owner resumes from
    Set {
        /// The lease key
        key: String,
        /// The checkpoint (for the Kinesis consumer: a sequence number)
        value: String,
        /// Have its owner hand it over gracefully first
        #[arg(long)]
        force: bool,
        /// How long to wait for the owner's application with --force
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// Remove the checkpoint: the next owner starts from the initial position
    Reset {
        /// The lease key
        key: String,
        /// Have its owner hand it over gracefully first
        #[arg(long)]
        force: bool,
        /// How long to wait for the owner's application with --force
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
}

/// What a command failed with: one line for a person.
type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: could not start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", text::chain(&*err));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Error> {
    let target = Target {
        table: cli.table.clone(),
        endpoint: cli.endpoint.clone(),
        redis: cli.redis.clone(),
        key_prefix: cli.key_prefix.clone(),
    };
    if target.redis.is_none() && target.key_prefix.is_some() {
        return Err("--key-prefix is for a Redis table: pass --redis URL too".into());
    }
    let json = cli.json;
    match cli.command {
        Command::Status { watch, interval } => {
            let backend = target.backend().await?;
            status::run(&backend, json, watch.then_some(interval)).await
        }
        Command::Release { key, timeout } => {
            let key = LeaseKey::new(key)?;
            let admin = Admin::new(target.backend().await?.lease_store());
            eprintln!("asking the owner of {key} to hand it over");
            let given = admin.release(&key, timeout, waiting_for_owner).await?;
            finish_line();
            print_given(json, "release", &key, &given);
            Ok(())
        }
        Command::Drain { worker, timeout } => {
            let worker = WorkerId::new(worker)?;
            let admin = Admin::new(target.backend().await?.lease_store());
            let done = admin
                .drain(&worker, timeout, |p| drain_line(&worker, p))
                .await?;
            finish_line();
            if json {
                println!(
                    "{}",
                    json!({"command": "drain", "worker": worker.as_str(), "done": done.done()})
                );
            } else {
                println!("worker {worker} has left the fleet and holds no lease");
            }
            Ok(())
        }
        Command::Checkpoint { action } => {
            let admin = Admin::new(target.backend().await?.lease_store());
            let (key, value, force, timeout) = match &action {
                CheckpointAction::Set {
                    key,
                    value,
                    force,
                    timeout,
                } => (key, Some(value.as_str()), *force, *timeout),
                CheckpointAction::Reset {
                    key,
                    force,
                    timeout,
                } => (key, None, *force, *timeout),
            };
            let key = LeaseKey::new(key.as_str())?;
            let given = admin
                .set_checkpoint(&key, value, force, timeout, |lease| {
                    waiting_for_owner(lease)
                })
                .await?;
            finish_line();
            let what = if value.is_some() {
                "checkpoint set"
            } else {
                "checkpoint reset"
            };
            print_given(json, what, &key, &given);
            Ok(())
        }
        Command::Delete {
            key,
            force,
            timeout,
        } => {
            let key = LeaseKey::new(key)?;
            let admin = Admin::new(target.backend().await?.lease_store());
            let deleted = admin
                .delete(&key, force, timeout, waiting_for_owner)
                .await?;
            finish_line();
            if json {
                println!(
                    "{}",
                    json!({"command": "delete", "key": key.as_str(), "checkpoint": deleted.checkpoint})
                );
            } else {
                println!(
                    "lease {key} deleted (its checkpoint was {})",
                    deleted.checkpoint.as_deref().unwrap_or("none")
                );
            }
            Ok(())
        }
        Command::CreateTable { provisioned } => {
            target.dynamodb_only(
                "create-table",
                "a Redis table needs no creation (its first lease creates it)",
            )?;
            connect::create_table(&target, provisioned.as_deref(), json).await
        }
        Command::DescribeTable => {
            target.dynamodb_only("describe-table", "`status` shows what a Redis table holds")?;
            connect::describe_table(&target, json).await
        }
        Command::Bench {
            workers,
            leases,
            lease,
            rest,
            keep_table,
        } => {
            target.dynamodb_only("bench", "it measures the library on DynamoDB")?;
            let run = bench::Bench {
                workers,
                leases,
                lease,
                rest,
                keep_table,
            };
            bench::run(&target, run, json).await
        }
        Command::ImportKcl { from, to, apply } => {
            target.dynamodb_only("import-kcl", "it copies into a DynamoDB table")?;
            kcl::run(&target, &from, &to, apply, json).await
        }
        Command::IamPolicy {
            stream,
            fan_out,
            multi_stream,
            bench,
            region,
            account,
        } => {
            target.dynamodb_only("iam-policy", "Redis access is granted by the server's ACLs")?;
            let table = target.table()?;
            let reading = iam::Reading {
                streams: &stream,
                fan_out,
                multi_stream,
                bench,
            };
            let policy = iam::policy(table, reading, region.as_deref(), account.as_deref());
            println!("{}", serde_json::to_string_pretty(&policy)?);
            Ok(())
        }
    }
}

/// The progress line of a wait for an owner's application to let go.
fn waiting_for_owner(lease: &Lease) {
    let owner = lease.owner.as_ref().map_or("nobody", |o| o.as_str());
    text::progress(&format!(
        "waiting for {owner} to hand {} over (its application checkpoints and stops)",
        lease.key
    ));
}

fn drain_line(worker: &WorkerId, progress: &DrainProgress) {
    text::progress(&format!(
        "draining {worker}: {} leases still held, {}",
        progress.leases_held.len(),
        if progress.member_present {
            "still in the fleet"
        } else {
            "left the fleet"
        }
    ));
}

fn finish_line() {
    text::progress_done();
}

fn print_given(json: bool, what: &str, key: &LeaseKey, given: &GivenBack) {
    let to = match given {
        GivenBack::To(worker) => Some(worker.as_str()),
        _ => None,
    };
    if json {
        println!(
            "{}",
            json!({"command": what, "key": key.as_str(), "given_to": to})
        );
    } else {
        match to {
            Some(to) => println!("{what}: lease {key} given to {to}"),
            None => println!(
                "{what}: lease {key} left unowned; the workers take it at their next round"
            ),
        }
    }
}
