//! The pure balancing decision at scale: one observer's plan over 100,000 leases and 1,000
//! live workers, for our policy and the KCL 2.x baseline.
//!
//! ```sh
//! cargo bench --bench balance
//! ```

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use shardlease::balance::{
    BalancePolicy, CountBalance, FleetView, Holder, KclBalance, LeaseView, WorkerView,
};
use shardlease::{LeaseKey, WorkerId};

const LEASES: usize = 100_000;
const WORKERS: usize = 1_000;

fn worker(i: usize) -> WorkerId {
    WorkerId::new(format!("worker-{i:04}")).unwrap()
}

/// `LEASES` leases spread evenly over the first `holders` of `WORKERS` live workers.
fn fleet(holders: usize) -> FleetView {
    FleetView {
        leases: (0..LEASES)
            .map(|i| LeaseView {
                key: LeaseKey::new(format!("shardId-{i:012}")).unwrap(),
                holder: Holder::Held(worker(i % holders)),
                load: None,
                settled: true,
            })
            .collect(),
        workers: (0..WORKERS)
            .map(|i| WorkerView {
                id: worker(i),
                capacity: u32::MAX,
                weight: 1.0,
                reported: true,
                load: None,
            })
            .collect(),
    }
}

fn plans(c: &mut Criterion) {
    let at_rest = fleet(WORKERS);
    let after_join = fleet(WORKERS - 100);
    let mut group = c.benchmark_group("plan 100k leases x 1k workers");
    group.sample_size(20);
    for (name, view) in [("at rest", &at_rest), ("100 joined", &after_join)] {
        let me = worker(WORKERS - 1);
        group.bench_function(format!("CountBalance, {name}"), |b| {
            b.iter_batched(
                || view.clone(),
                |view| black_box(CountBalance.plan(&view, &me)),
                BatchSize::LargeInput,
            )
        });
        group.bench_function(format!("KclBalance, {name}"), |b| {
            b.iter_batched(
                || view.clone(),
                |view| black_box(KclBalance::default().plan(&view, &me)),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, plans);
criterion_main!(benches);
