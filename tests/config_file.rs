//! The sample configuration file, `examples/shardlease.toml`, parses into the configurations
//! it configures with the values it says (feature `serde`).

use std::time::Duration;

use serde::Deserialize;
use shardlease::kinesis::{ConsumerConfig, InitialPosition, LoadFigure};
use shardlease::store::dynamodb::{Billing, DynamoConfig};
use shardlease::{Balance, WorkerConfig};

#[derive(Deserialize)]
struct File {
    worker: WorkerConfig,
    table: DynamoConfig,
    consumer: ConsumerConfig,
}

#[test]
fn the_sample_file_configures_what_it_says() {
    let file: File = toml::from_str(include_str!("../examples/shardlease.toml")).unwrap();
    let worker = WorkerConfig::default()
        .lease_duration(Duration::from_secs(20))
        .handoff_timeout(Duration::from_secs(60))
        .max_leases_per_worker(64)
        .shutdown_timeout(Duration::from_secs(45))
        .progress_window(Some(Duration::from_secs(300)));
    assert_eq!(file.worker, worker);
    assert_eq!(file.table.table_name, "my-app-leases");
    assert_eq!(file.table.billing, Billing::OnDemand);
    assert_eq!(file.table.tags, [("team".to_owned(), "ingest".to_owned())]);
    assert_eq!(file.table.retry.attempt_timeout, Duration::from_secs(2));
    assert_eq!(file.table.retry.max_attempts, 8);
    assert_eq!(file.consumer.initial_position, InitialPosition::TrimHorizon);
    assert_eq!(file.consumer.max_records, 1000);
    assert_eq!(
        file.consumer.idle_time_between_reads,
        Duration::from_millis(500)
    );
}

#[test]
fn balance_by_load_is_configured_and_a_bad_weight_is_refused_by_field() {
    let worker: WorkerConfig = toml::from_str(
        "balance = \"load\"\nweight = 2.0\nload_long_window = \"5m\"\nload_publish_interval = \"30s\"",
    )
    .unwrap();
    assert_eq!(
        worker,
        WorkerConfig::default()
            .balance(Balance::Load)
            .weight(2.0)
            .load_long_window(Duration::from_secs(300))
            .load_publish_interval(Duration::from_secs(30))
    );
    for bad in [
        "weight = 0.0",
        "weight = -1.0",
        "load_short_window = \"10m\"",
    ] {
        let err = toml::from_str::<WorkerConfig>(bad).unwrap_err();
        let field = bad.split(' ').next().unwrap();
        assert!(err.to_string().contains(field), "{bad}: {err}");
    }
    let err = toml::from_str::<WorkerConfig>("balance = \"fair\"").unwrap_err();
    assert!(err.to_string().contains("count"), "{err}");
    let consumer = toml::from_str::<ConsumerConfig>("load_figure = \"records\"").unwrap();
    assert_eq!(consumer.load_figure, LoadFigure::Records);
}

#[test]
fn a_table_without_a_name_or_with_a_bad_one_is_refused_by_field() {
    let err = toml::from_str::<DynamoConfig>("billing = \"on_demand\"").unwrap_err();
    assert!(err.to_string().contains("table_name"), "{err}");
    let err = toml::from_str::<DynamoConfig>("table_name = \"x\"").unwrap_err();
    assert!(err.to_string().contains("3 to 255"), "{err}");
    let err = toml::from_str::<DynamoConfig>(
        "table_name = \"ok-name\"\nbilling = { provisioned = { read = 0, write = 5 } }",
    )
    .unwrap_err();
    assert!(err.to_string().contains("provisioned capacity"), "{err}");
    let err = toml::from_str::<DynamoConfig>("table_name = \"ok-name\"\nretry = { tries = 3 }")
        .unwrap_err();
    assert!(err.to_string().contains("tries"), "{err}");
}

#[test]
fn the_environment_configures_a_worker() {
    let vars = [
        (
            "SHARDLEASE_WORKER_LEASE_DURATION".to_owned(),
            "30s".to_owned(),
        ),
        (
            "SHARDLEASE_WORKER_MAX_LEASES_PER_WORKER".to_owned(),
            "7".to_owned(),
        ),
        (
            "SHARDLEASE_WORKER_PROGRESS_WINDOW".to_owned(),
            "90s".to_owned(),
        ),
    ];
    let config: WorkerConfig = envy::prefixed("SHARDLEASE_WORKER_")
        .from_iter(vars)
        .unwrap();
    let expected = WorkerConfig::default()
        .lease_duration(Duration::from_secs(30))
        .max_leases_per_worker(7)
        .progress_window(Some(Duration::from_secs(90)));
    assert_eq!(config, expected);
}
