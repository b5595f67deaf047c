use super::*;

fn op(kind: u64, key: &str, hits: u64, ttl: u64) -> Op {
    let keys = match kind {
        1 => vec![key.to_owned(), format!("{key}:prev")],
        _ => vec![key.to_owned()],
    };
    Op {
        keys,
        args: [kind, hits, ttl, 0, 0, 0, 0],
        slot: None,
    }
}

fn merged_args(c: &Coalesced<'_>) -> Vec<[u64; 5]> {
    c.merged
        .iter()
        .map(|m| [m.args[0], m.args[1], m.args[2], m.args[3], m.args[4]])
        .collect()
}

#[test]
fn one_counter_is_sent_once_and_each_request_sees_its_count_in_order() {
    let ops = [
        op(0, "hot", 1, 60),
        op(0, "hot", 2, 61),
        op(0, "hot", 3, 60),
    ];
    let c = Coalesced::new(ops.iter(), ops.len());
    // One increment of 6, with the longest expiry.
    assert_eq!(merged_args(&c), [[0, 6, 61, 0, 0]]);
    // The counter was 4 before: alone and in order they would see 5, 7, 10.
    assert_eq!(
        c.answers(&[10, 0, 0]).unwrap(),
        [5, 0, 0, 7, 0, 0, 10, 0, 0]
    );
}

#[test]
fn different_counters_and_shapes_stay_apart_and_keep_their_order() {
    let ops = [
        op(0, "a", 1, 60),
        op(0, "b", 1, 60),
        op(1, "a", 1, 120),
        op(0, "a", 1, 60),
        op(1, "a", 1, 120),
    ];
    let c = Coalesced::new(ops.iter(), ops.len());
    assert_eq!(
        merged_args(&c),
        [[0, 2, 60, 0, 0], [0, 1, 60, 0, 0], [1, 2, 120, 0, 0]]
    );
    // The sliding window's previous count goes to both its requests.
    let raw = [8, 0, 0, 3, 0, 0, 20, 9, 0];
    assert_eq!(
        c.answers(&raw).unwrap(),
        [7, 0, 0, 3, 0, 0, 19, 9, 0, 8, 0, 0, 20, 9, 0]
    );
}

#[test]
fn token_buckets_are_never_merged() {
    let ops = [op(2, "tb", 1, 5), op(2, "tb", 1, 5)];
    let c = Coalesced::new(ops.iter(), ops.len());
    assert_eq!(c.merged.len(), 2);
    assert_eq!(
        c.answers(&[1, 10, 3, 0, 20, 4]).unwrap(),
        [1, 10, 3, 0, 20, 4]
    );
}

#[test]
fn refusals_reach_every_request_on_the_counter_unchanged() {
    let ops = [op(0, "hot", 1, 60), op(0, "hot", 1, 60)];
    let c = Coalesced::new(ops.iter(), ops.len());
    assert_eq!(c.answers(&[-1, 0, 0]).unwrap(), [-1, 0, 0, -1, 0, 0]);
    assert_eq!(c.answers(&[-2, 0, 0]).unwrap(), [-2, 0, 0, -2, 0, 0]);
}

#[test]
fn a_sum_past_i64_is_split_and_a_short_reply_is_the_stores_fault() {
    let big = i64::MAX as u64;
    let ops = [op(0, "hot", big, 60), op(0, "hot", 1, 60)];
    let c = Coalesced::new(ops.iter(), ops.len());
    assert_eq!(c.merged.len(), 2);
    assert!(matches!(
        c.answers(&[1, 0, 0]),
        Err(StoreError::BadReply(_))
    ));
}
