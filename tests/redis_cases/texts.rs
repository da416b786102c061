//! The scripts' checks of text fields accept exactly what the Rust decoder accepts: UTF-8 in
//! every string it reads (owner, handoff target, checkpoint, `lastOp`), ids as `WorkerId` and
//! `LeaseKey` validate them, JSON lists (parents, notices) as serde_json reads them, and the
//! lines of a member's lease loads (`<lease key>\t<number>`, joined by `\n`). A hash
//! the decoder calls malformed is never written over, and one it decodes is not refused.

use shardlease::LeaseStore;

use super::{assert_written_iff_decoded, put_raw};
use crate::{config, connect, deadline, key, side, worker, PROCESS};

/// Text the fields may hold: ids at their bounds, reserved and control characters, broken and
/// valid UTF-8, JSON lists with blanks, raw and escaped controls, surrogates and bad shapes.
fn texts() -> Vec<Vec<u8>> {
    let plain: [&[u8]; 38] = [
        b"a",
        b"",
        b"\xc3\xa9",
        b"\xf0\x9f\x98\x80",
        b"\xe2\x80\xa8",
        b"\xff",
        b"\xc3",
        b"a\xc3",
        b"\xc0\xaf",
        b"\xe0\x80\xaf",
        b"\xf0\x80\x80\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\x80",
        b"a\nb",
        b"\x7f",
        b"\xc2\x85",
        b"shardlease#x",
        b"shardlease#retire",
        b"[]",
        b"[\"a\"]",
        b" [\"a\"]",
        b"\t[\"a\"]\n",
        b"[ \"a\" , \"b\" ]",
        b"[\"a\nb\"]",
        b"[\"a\\nb\"]",
        b"[\"a\x7f\"]",
        b"[\"\xff\"]",
        b"[\"\\ud800\"]",
        b"[\"\\udc00\"]",
        b"[\"\\ud83d\\ude00\"]",
        b"[\"\\u00e9\"]",
        b"[\"\\u0000\"]",
        b"[\"shardlease#x\"]",
        b"{}",
        b"[1]",
        b"[\"a\",]",
        b"[\"a\"]x",
    ];
    let mut texts: Vec<Vec<u8>> = plain.iter().map(|t| t.to_vec()).collect();
    // Lines of lease loads: good, a key twice, a line short or long, a blank line.
    let loads: [&[u8]; 9] = [
        b"a\t1\nb\t2",
        b"a b=c:d\t0",
        b"a\t1\na\t2",
        b"a\t1\n",
        b"\na\t1",
        b"\n",
        b"a\t1\t2",
        b"a\t1\r\nb\t2",
        b"a\t",
    ];
    texts.extend(loads.iter().map(|t| t.to_vec()));
    texts.push(vec![b'a'; 1024]);
    texts.push(vec![b'a'; 1025]);
    texts
}

#[tokio::test]
async fn a_write_changes_a_text_field_exactly_when_the_rust_decoder_reads_it() {
    let store = connect(config("texts")).await;
    let mut side = side().await;
    let (b, w) = (worker("b"), worker("w"));
    let shard = key("shard-1");
    let member_key = "shardlease#member#w";
    let (lease_item, member_item) = (store.item_key("shard-1"), store.item_key(member_key));
    let lease: [(&str, &[u8]); 3] = [
        ("leaseKey", b"shard-1"),
        ("leaseCounter", b"5"),
        ("leaseTenure", b"1"),
    ];
    let member: [(&str, &[u8]); 3] = [
        ("leaseKey", member_key.as_bytes()),
        ("heartbeat", b"3"),
        ("workerIncarnation", b"7"),
    ];
    let lease_fields = [
        "leaseOwner",
        "handoffTo",
        "checkpoint",
        "lastOp",
        "parentLeaseKeys",
    ];
    for text in texts() {
        for field in lease_fields {
            let mut fields = lease.to_vec();
            fields.push((field, &text));
            let before = put_raw(&mut side, &store, "shard-1", &fields).await;
            let read = store.get(&shard, deadline()).await;
            // The item's nonce, as a worker would read it (0: none, or none that decodes).
            let nonce = read
                .as_ref()
                .ok()
                .and_then(Option::as_ref)
                .map_or(0, |l| l.nonce);
            let decoded = read.map(drop);
            // The take's condition reads the counter alone.
            let written = store.take(&shard, nonce, &b, PROCESS, 5, deadline()).await;
            let (case, written) = ((field, &text[..]), written.map(drop));
            assert_written_iff_decoded(&mut side, &lease_item, before, case, decoded, written)
                .await;
        }
        // A lease key in the lease loads, alone and after a good line; and the text as the
        // whole field, for its lines.
        let loads = [
            [&text[..], b"\t1"].concat(),
            [&b"a\t1\n"[..], &text, b"\t2"].concat(),
            text.clone(),
        ];
        for loads in loads {
            let mut fields = member.to_vec();
            fields.push(("leaseLoads", &loads));
            let before = put_raw(&mut side, &store, member_key, &fields).await;
            let decoded = store.get_member(&w, true, deadline()).await.map(drop);
            let written = store.beat(&w, PROCESS, None, None, &[], deadline()).await;
            let (case, written) = (("leaseLoads", &loads[..]), written.map(drop));
            assert_written_iff_decoded(&mut side, &member_item, before, case, decoded, written)
                .await;
        }
        for field in ["notices", "lastOp"] {
            let mut fields = member.to_vec();
            fields.push((field, &text));
            let before = put_raw(&mut side, &store, member_key, &fields).await;
            let decoded = store.get_member(&w, true, deadline()).await.map(drop);
            // The beat's condition reads the incarnation alone.
            let written = store.beat(&w, PROCESS, None, None, &[], deadline()).await;
            let (case, written) = ((field, &text[..]), written.map(drop));
            assert_written_iff_decoded(&mut side, &member_item, before, case, decoded, written)
                .await;
        }
    }
}
