//! The conformance suite on the DynamoDB store against dynalite (started by `scripts/test.sh`).

mod conformance;

crate::conformance_suite!(conformance::Dynamo(
    conformance::dynamo::Emulator::dynalite()
));
crate::dynamo_suite!(conformance::dynamo::Emulator::dynalite());
