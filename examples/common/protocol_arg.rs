//! `--protocol leases|sessions`, the library's two lease protocols, for the examples that take
//! it (kept out of `common/mod.rs`, which the demo shares without clap).

use clap::ValueEnum;
use shardlease::Protocol;

/// `--protocol`: the library's two lease protocols.
#[derive(Clone, Copy, ValueEnum)]
pub enum ProtocolArg {
    Leases,
    Sessions,
}

impl From<ProtocolArg> for Protocol {
    fn from(protocol: ProtocolArg) -> Self {
        match protocol {
            ProtocolArg::Leases => Protocol::Leases,
            ProtocolArg::Sessions => Protocol::Sessions,
        }
    }
}
