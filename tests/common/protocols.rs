//! `on_both_protocols!("cases/NAME.rs")`: includes a file of test cases twice, in `mod sessions`
//! (the default protocol) and in `mod leases`, each with `base()`, that protocol's default
//! configuration. Declare it with `#[macro_use] #[path = "common/protocols.rs"] mod protocols;`.

macro_rules! on_both_protocols {
    ($cases:literal) => {
        mod sessions {
            fn base() -> shardlease::WorkerConfig {
                shardlease::WorkerConfig::default()
            }
            include!($cases);
        }

        mod leases {
            fn base() -> shardlease::WorkerConfig {
                shardlease::WorkerConfig::default().protocol(shardlease::Protocol::Leases)
            }
            include!($cases);
        }
    };
}
