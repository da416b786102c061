//! The cases only the Redis store has, beyond those in `tests/conformance_redis.rs`, one file
//! per behaviour. They use the helpers of that file (its crate root).

mod lost_answers;
mod numbers;
