//! The conformance suite on the in-memory store.

mod conformance;

crate::conformance_suite!(conformance::Memory);
