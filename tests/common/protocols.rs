//! `on_both_protocols!("cases/NAME.rs")`: includes a file of test cases twice, in `mod sessions`
//! (the default protocol) and in `mod leases`, each with `base()` (that protocol's default
//! configuration), `PROTOCOL` (its name) and `figure()` (a `FIGURE` line naming it). Declare it
//! with `#[macro_use] #[path = "common/protocols.rs"] mod protocols;` after `mod fleet`.

macro_rules! on_both_protocols {
    (@common $name:literal) => {
        /// The protocol's name, as the `FIGURE` lines print it.
        #[allow(dead_code)]
        const PROTOCOL: &str = $name;

        /// Prints a `FIGURE` line naming the protocol.
        #[allow(dead_code)]
        fn figure(name: &str, value: std::time::Duration) {
            crate::fleet::Fleet::figure(&format!("{PROTOCOL}: {name}"), value);
        }
    };
    ($cases:literal) => {
        mod sessions {
            fn base() -> shardlease::WorkerConfig {
                shardlease::WorkerConfig::default()
            }
            on_both_protocols!(@common "sessions");
            include!($cases);
        }

        mod leases {
            fn base() -> shardlease::WorkerConfig {
                shardlease::WorkerConfig::default().protocol(shardlease::Protocol::Leases)
            }
            on_both_protocols!(@common "leases");
            include!($cases);
        }
    };
}
