//! The conformance suite on the DynamoDB store against moto (started by `scripts/test.sh`).

mod conformance;

crate::conformance_suite!(conformance::Dynamo(conformance::dynamo::Emulator::moto()));
crate::dynamo_suite!(conformance::dynamo::Emulator::moto());
