//! The scripts' checks of number fields accept exactly the text the Rust decoder accepts: a
//! hash the decoder calls malformed is refused by every write and skipped by listings, never
//! written over, and a hash it decodes is not refused.

use shardlease::lease::{Member, NewLease};
use shardlease::store::StoreResult;
use shardlease::{LeaseStore, StoreError};

use super::{assert_written_iff_decoded, put_raw, raw_hash, Hash, Side};
use crate::{config, connect, deadline, key, side, worker, HashFields, PROCESS};

/// Asserts that write `op` answered a malformed-item error naming `field` and left the hash
/// `item` as `before`.
async fn assert_refused(
    side: &mut Side,
    item: &str,
    before: &Hash,
    field: &str,
    op: &str,
    result: StoreResult<()>,
) {
    match &result {
        Err(StoreError::Malformed { field: named, .. }) if *named == field => {}
        other => panic!("{op}: expected a malformed {field}, got {other:?}"),
    }
    assert_eq!(
        &raw_hash(side, item).await,
        before,
        "{op} wrote over the hash"
    );
}

/// Load figures that Lua's `tonumber` reads but Rust's `f64` parser does not.
const LOOSE_LOADS: [&str; 5] = ["0x10", "0x1p4", " 5", "5 ", "5\n"];

const MEMBER_W: &str = "shardlease#member#w";

#[tokio::test]
async fn a_load_only_lua_reads_as_a_number_is_malformed_to_every_write_and_to_listings() {
    let store = connect(config("loose_load")).await;
    let mut side = side().await;
    let (a, b, w) = (worker("a"), worker("b"), worker("w"));
    let shard = key("shard-1");
    let (lease_item, member_item) = (store.item_key("shard-1"), store.item_key(MEMBER_W));
    // The member as a replacing open_session would have observed it.
    let observed = Member {
        worker: w.clone(),
        heartbeat: 3,
        incarnation: Some(PROCESS),
        load: None,
        weight: None,
        lease_loads: Default::default(),
        halted: Default::default(),
        capacity: None,
        notices: Default::default(),
        session: true,
    };
    for load in LOOSE_LOADS {
        // Every write's condition holds on these hashes: only the load can stop it.
        let lease: HashFields = &[
            ("leaseKey", "shard-1"),
            ("leaseCounter", "5"),
            ("leaseTenure", "1"),
            ("leaseOwner", "a"),
            ("handoffTo", "b"),
            ("leaseLoad", load),
        ];
        let member: HashFields = &[
            ("leaseKey", MEMBER_W),
            ("heartbeat", "3"),
            ("workerIncarnation", "7"),
            ("workerProtocol", "sessions"),
            ("workerLoad", load),
        ];
        let lease = put_raw(&mut side, &store, "shard-1", lease).await;
        let member = put_raw(&mut side, &store, MEMBER_W, member).await;

        let snapshot = store.snapshot(deadline()).await.unwrap();
        assert!(snapshot.leases.is_empty() && snapshot.members.is_empty());
        assert_eq!(snapshot.malformed, 2, "load {load:?}");
        assert!(store.list_members(deadline()).await.unwrap().is_empty());

        // Each write, then the hash as it was: a script that passed the load would have
        // written (or, for the deletes, removed) it.
        macro_rules! lease {
            ($op:literal, $write:expr) => {
                let result = $write.await.map(drop);
                assert_refused(&mut side, &lease_item, &lease, "leaseLoad", $op, result).await
            };
        }
        lease!("get", store.get(&shard, deadline()));
        lease!(
            "create",
            store.create(NewLease::new(shard.clone()), deadline())
        );
        lease!("renew", store.renew(&shard, 0, &a, 1, None, deadline()));
        lease!("take", store.take(&shard, 0, &b, PROCESS, 5, deadline()));
        lease!(
            "request_handoff",
            store.request_handoff(&shard, 0, &a, 1, &b, deadline())
        );
        lease!(
            "complete_handoff",
            store.complete_handoff(&shard, 0, &a, 1, &b, deadline())
        );
        lease!("give", store.give(&shard, 0, &b, 5, deadline()));
        lease!("release", store.release(&shard, 0, &a, 1, deadline()));
        lease!(
            "checkpoint",
            store.checkpoint(&shard, 0, &a, 1, 1, "seq-9", deadline())
        );
        lease!("delete", store.delete(&shard, 0, 5, 1, deadline()));

        macro_rules! member {
            ($op:literal, $write:expr) => {
                let result = $write.await.map(drop);
                assert_refused(&mut side, &member_item, &member, "workerLoad", $op, result).await
            };
        }
        member!("get_member", store.get_member(&w, true, deadline()));
        member!(
            "heartbeat",
            store.heartbeat(&w, PROCESS, None, None, deadline())
        );
        member!(
            "remove_member",
            store.remove_member(&w, Some(3), deadline())
        );
        member!(
            "open_session",
            store.open_session(&w, PROCESS, None, Some(&observed), deadline())
        );
        member!("beat", store.beat(&w, PROCESS, None, None, &[], deadline()));
        member!("end_session", store.end_session(&w, PROCESS, 3, deadline()));
        member!(
            "notify",
            store.notify(&w, PROCESS, &["n".into()], deadline())
        );
    }
}

/// Number texts: decimals at and past each field's bounds, and forms only one of Lua's
/// `tonumber` and Rust's parsers reads.
const TEXTS: [&str; 33] = [
    "0",
    "7",
    "-0",
    "+1",
    "-1",
    "01",
    "1.0",
    "1.5",
    ".5",
    "5.",
    "1e3",
    "1E-3",
    "+.5e+2",
    "1e400",
    "-1e400",
    "1e-400",
    "inf",
    "NaN",
    "infinity",
    "0x10",
    "0x1p4",
    " 5",
    "5 ",
    "",
    "1_0",
    "\u{661}",
    "1.2.3",
    "4294967295",
    "4294967296",
    "999999999999999999",
    "1000000000000000000",
    "18446744073709551615",
    "18446744073709551616",
];

/// `fields` with `field` set to `text`, added when absent.
fn with<'a>(fields: HashFields<'a>, field: &'a str, text: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut changed: Vec<_> = fields
        .iter()
        .filter(|(f, _)| *f != field)
        .copied()
        .collect();
    changed.push((field, text));
    changed
}

#[tokio::test]
async fn a_write_changes_a_number_field_exactly_when_the_rust_decoder_reads_it() {
    let store = connect(config("number_texts")).await;
    let mut side = side().await;
    let (a, b, w) = (worker("a"), worker("b"), worker("w"));
    let shard = key("shard-1");
    let (lease_item, member_item) = (store.item_key("shard-1"), store.item_key(MEMBER_W));
    let lease: HashFields = &[
        ("leaseKey", "shard-1"),
        ("leaseCounter", "5"),
        ("leaseTenure", "1"),
        ("leaseOwner", "a"),
    ];
    let member: HashFields = &[
        ("leaseKey", MEMBER_W),
        ("heartbeat", "3"),
        ("workerIncarnation", "7"),
    ];
    let lease_fields = [
        "leaseCounter",
        "leaseTenure",
        "ownerSwitchesSinceCheckpoint",
        "ownerIncarnation",
        "leaseNonce",
        "leaseLoad",
    ];
    let member_fields = [
        "heartbeat",
        "workerIncarnation",
        "workerCapacity",
        "workerLoad",
        "workerWeight",
    ];
    for text in TEXTS {
        for field in lease_fields {
            let before = put_raw(&mut side, &store, "shard-1", &with(lease, field, text)).await;
            let read = store.get(&shard, deadline()).await;
            // The item's nonce, as a worker would read it (0: none, or none that decodes).
            let nonce = read
                .as_ref()
                .ok()
                .and_then(Option::as_ref)
                .map_or(0, |l| l.nonce);
            let decoded = read.map(drop);
            // The renewal's condition reads the tenure; the take's does not.
            let written = if field == "leaseTenure" {
                store.take(&shard, nonce, &b, PROCESS, 5, deadline()).await
            } else {
                store.renew(&shard, nonce, &a, 1, None, deadline()).await
            };
            let (case, written) = ((field, text.as_bytes()), written.map(drop));
            assert_written_iff_decoded(&mut side, &lease_item, before, case, decoded, written)
                .await;
        }
        for field in member_fields {
            let before = put_raw(&mut side, &store, MEMBER_W, &with(member, field, text)).await;
            let decoded = store.get_member(&w, true, deadline()).await.map(drop);
            // The beat's condition reads the incarnation; the heartbeat's does not.
            let written = if field == "workerIncarnation" {
                store.heartbeat(&w, PROCESS, None, None, deadline()).await
            } else {
                store.beat(&w, PROCESS, None, None, &[], deadline()).await
            };
            let (case, written) = ((field, text.as_bytes()), written.map(drop));
            assert_written_iff_decoded(&mut side, &member_item, before, case, decoded, written)
                .await;
        }
        // The number of a lease load, alone and after a good line.
        for loads in [format!("shard-1\t{text}"), format!("a\t1\nshard-1\t{text}")] {
            let fields = with(member, "leaseLoads", &loads);
            let before = put_raw(&mut side, &store, MEMBER_W, &fields).await;
            let decoded = store.get_member(&w, true, deadline()).await.map(drop);
            let written = store.beat(&w, PROCESS, None, None, &[], deadline()).await;
            let (case, written) = (("leaseLoads", loads.as_bytes()), written.map(drop));
            assert_written_iff_decoded(&mut side, &member_item, before, case, decoded, written)
                .await;
        }
    }
}
