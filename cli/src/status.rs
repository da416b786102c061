//! `status`: who holds what, once or refreshed in place.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{json, Value};
use shardlease::admin::lease_states;
use shardlease::lease::Snapshot;
use shardlease::store::dynamodb::DynamoStore;
use shardlease::store::LeaseStore;
use tokio::time::Instant;

use crate::connect::Backend;
use crate::redis_table;
use crate::{text, Error};

/// What this process saw change, and when: a counter (or heartbeat) value that has not moved
/// since its first look is "still" for that long, on this process's clock.
#[derive(Default)]
struct Observed {
    leases: HashMap<String, ((u64, u64, u64), Instant)>,
    members: HashMap<String, ((Option<u64>, u64), Instant)>,
}

impl Observed {
    fn lease(&mut self, key: &str, value: (u64, u64, u64), now: Instant) -> Duration {
        let entry = self.leases.entry(key.to_owned()).or_insert((value, now));
        if entry.0 != value {
            *entry = (value, now);
        }
        now - entry.1
    }

    fn member(&mut self, id: &str, value: (Option<u64>, u64), now: Instant) -> Duration {
        let entry = self.members.entry(id.to_owned()).or_insert((value, now));
        if entry.0 != value {
            *entry = (value, now);
        }
        now - entry.1
    }
}

/// Prints the status once, or every `watch` until interrupted.
pub async fn run(store: &Backend, json: bool, watch: Option<Duration>) -> Result<(), Error> {
    let mut observed = Observed::default();
    let terminal = std::io::stdout().is_terminal();
    loop {
        let document = look(store, &mut observed, watch.is_some()).await?;
        if json {
            println!("{}", serde_json::to_string(&document)?);
        } else {
            if watch.is_some() && terminal {
                // Clear the screen and go home: refresh in place.
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", render(&document));
        }
        let Some(every) = watch else {
            return Ok(());
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
        if !terminal && !json {
            println!();
        }
    }
}

/// One look at the table, as the JSON document `--json` prints.
async fn look(store: &Backend, observed: &mut Observed, watching: bool) -> Result<Value, Error> {
    let snapshot: Snapshot = store
        .lease_store()
        .snapshot(Instant::now() + Duration::from_secs(30))
        .await?;
    let written = match store {
        Backend::Dynamo(store) => last_writes(store).await?,
        Backend::Redis(store) => redis_table::last_writes(store).await?,
    };
    let now = Instant::now();
    let wall = chrono::Utc::now();
    let age = |key: &str| {
        written
            .get(key)
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
            .map(|at| (wall - at.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 1000.0)
    };
    let held: HashMap<&str, usize> = snapshot
        .leases
        .iter()
        .filter_map(|l| l.owner.as_ref())
        .fold(HashMap::new(), |mut held, owner| {
            *held.entry(owner.as_str()).or_default() += 1;
            held
        });
    let workers: Vec<Value> = snapshot
        .members
        .iter()
        .map(|m| {
            let still = observed.member(
                m.worker.as_str(),
                (m.incarnation.map(|i| i.get()), m.heartbeat),
                now,
            );
            json!({
                "id": m.worker.as_str(),
                "protocol": if m.session { "sessions" } else { "leases" },
                "incarnation": m.incarnation.map(|i| i.to_string()),
                "heartbeat": m.heartbeat,
                "heartbeat_age_s": age(&format!("shardlease#member#{}", m.worker)),
                "heartbeat_still_s": watching.then_some(still.as_secs_f64()),
                "leases_held": held.get(m.worker.as_str()).copied().unwrap_or(0),
                "load": m.load,
                "capacity": m.capacity,
                "notices": m.notices.len(),
                "halted": m.halted.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let states = lease_states(&snapshot.leases);
    // Leases their holder's application halted (a failure it cannot get past), as the holder's
    // record names them: held, unprocessed, and left out of the balance.
    let halted: std::collections::HashSet<(&str, &str)> = snapshot
        .members
        .iter()
        .flat_map(|m| m.halted.iter().map(|k| (m.worker.as_str(), k.as_str())))
        .collect();
    let leases: Vec<Value> = snapshot
        .leases
        .iter()
        .zip(states)
        .map(|(l, state)| {
            let still = observed.lease(l.key.as_str(), (l.counter, l.tenure, l.nonce), now);
            json!({
                "key": l.key.as_str(),
                "owner": l.owner.as_ref().map(|o| o.as_str()),
                "tenure": l.tenure,
                "counter": l.counter,
                "checkpoint": l.checkpoint,
                "handoff_to": l.handoff_to.as_ref().map(|t| t.as_str()),
                "status": state.as_str(),
                "halted": l.owner.as_ref().is_some_and(|o| halted.contains(&(o.as_str(), l.key.as_str()))),
                "parents": l.parents.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                "load": l.load,
                "written_age_s": age(l.key.as_str()),
                "counter_still_s": watching.then_some(still.as_secs_f64()),
            })
        })
        .collect();
    Ok(json!({
        "table": store.table_name(),
        "at": wall.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "workers": workers,
        "leases": leases,
        "malformed_items": snapshot.malformed,
    }))
}

/// Each item's `updatedAt` (wall-clock time of its last write, for people only), by key.
async fn last_writes(store: &DynamoStore) -> Result<HashMap<String, String>, Error> {
    let client = store.client();
    let mut out = HashMap::new();
    let mut from = None;
    loop {
        let page = client
            .scan()
            .table_name(store.table_name())
            .consistent_read(true)
            .projection_expression("leaseKey, updatedAt")
            .set_exclusive_start_key(from)
            .send()
            .await
            .map_err(|err| {
                format!(
                    "scan {}: {}",
                    store.table_name(),
                    aws_sdk_dynamodb::error::DisplayErrorContext(err)
                )
            })?;
        for item in page.items() {
            if let (Some(AttributeValue::S(key)), Some(AttributeValue::S(at))) =
                (item.get("leaseKey"), item.get("updatedAt"))
            {
                out.insert(key.clone(), at.clone());
            }
        }
        match page.last_evaluated_key() {
            Some(last) if !last.is_empty() => from = Some(last.clone()),
            _ => return Ok(out),
        }
    }
}

fn seconds(value: &Value) -> String {
    value
        .as_f64()
        .map_or("-".to_owned(), |s| format!("{s:.1}s"))
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "-".to_owned(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// The document as two tables for people.
fn render(document: &Value) -> String {
    let empty = Vec::new();
    let workers = document["workers"].as_array().unwrap_or(&empty);
    let leases = document["leases"].as_array().unwrap_or(&empty);
    let mut out = format!(
        "table {} at {}: {} workers, {} leases",
        cell(&document["table"]),
        cell(&document["at"]),
        workers.len(),
        leases.len()
    );
    let malformed = document["malformed_items"].as_u64().unwrap_or(0);
    if malformed > 0 {
        out.push_str(&format!(", {malformed} malformed items skipped"));
    }
    out.push_str("\n\n");
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            vec![
                cell(&w["id"]),
                cell(&w["protocol"]),
                cell(&w["heartbeat"]),
                seconds(&w["heartbeat_age_s"]),
                seconds(&w["heartbeat_still_s"]),
                cell(&w["leases_held"]),
                cell(&w["load"]),
                cell(&w["capacity"]),
            ]
        })
        .collect();
    out.push_str(&text::table(
        &[
            "WORKER",
            "PROTOCOL",
            "HEARTBEAT",
            "WRITTEN",
            "STILL",
            "LEASES",
            "LOAD",
            "CAPACITY",
        ],
        &rows,
    ));
    out.push('\n');
    let rows: Vec<Vec<String>> = leases
        .iter()
        .map(|l| {
            vec![
                cell(&l["key"]),
                cell(&l["owner"]),
                cell(&l["tenure"]),
                cell(&l["counter"]),
                cell(&l["checkpoint"]),
                cell(&l["handoff_to"]),
                if l["halted"] == true {
                    format!("{},halted", cell(&l["status"]))
                } else {
                    cell(&l["status"])
                },
                seconds(&l["written_age_s"]),
                seconds(&l["counter_still_s"]),
            ]
        })
        .collect();
    out.push_str(&text::table(
        &[
            "LEASE",
            "OWNER",
            "TENURE",
            "COUNTER",
            "CHECKPOINT",
            "HANDOFF",
            "STATUS",
            "WRITTEN",
            "STILL",
        ],
        &rows,
    ));
    out.push_str(
        "\nWRITTEN: since the item's last write (its updatedAt, by the wall clock). STILL (with \
         --watch): since this process saw the counter or heartbeat last move. halted: its owner's \
         application stopped on a failure it cannot get past; it stays there, unprocessed.\n",
    );
    out
}
