//! `fleet_cases!("cases/NAME.rs")`: includes a file of fleet test cases with `base()` (the
//! workers' default configuration) and `figure()` (prints a `FIGURE` line). Declare it with
//! `#[macro_use] #[path = "common/cases.rs"] mod cases;` after `mod fleet`.

macro_rules! fleet_cases {
    ($cases:literal) => {
        /// The configuration every case starts from: the library's defaults.
        #[allow(dead_code)]
        fn base() -> shardlease::WorkerConfig {
            shardlease::WorkerConfig::default()
        }

        /// Prints a `FIGURE` line.
        #[allow(dead_code)]
        fn figure(name: &str, value: std::time::Duration) {
            crate::fleet::Fleet::figure(name, value);
        }

        include!($cases);
    };
}
