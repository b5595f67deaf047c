use super::*;

#[test]
fn replies_decode_by_kind_and_refused_counters_are_errors() {
    let t = decode(
        [0, 1, 2, 3, 3].into_iter(),
        &[3, 0, 0, 4, 9, 0, 1, 250, 7, 2, 0, 1, 2, 0, -1],
    )
    .unwrap();
    let counted = |t: &[Answer]| -> Vec<Tally> {
        t.iter()
            .map(|a| match a {
                Answer::Counted(t) => *t,
                Answer::Elsewhere(s) => panic!("elsewhere {s}"),
                Answer::Late(n) => panic!("late {n}"),
            })
            .collect()
    };
    assert_eq!(
        counted(&t),
        [
            Tally::Count(3),
            Tally::Sliding {
                current: 4,
                previous: 9
            },
            Tally::Bucket {
                taken: true,
                debt_us: 250,
                asked: Some(7)
            },
            Tally::Slots {
                held: 2,
                peak: Some(1)
            },
            Tally::Slots {
                held: 2,
                peak: None
            }
        ]
    );
    assert_eq!(
        counted(&decode([0].into_iter(), &[-1, 0, 0]).unwrap()),
        [Tally::Count(u64::MAX)]
    );
    assert!(matches!(
        decode([0].into_iter(), &[-2, 0, 0]),
        Err(StoreError::Rejected(_))
    ));
    assert!(matches!(
        decode([0, 0].into_iter(), &[1, 0, 0]),
        Err(StoreError::BadReply(_))
    ));
    assert!(matches!(
        decode([0].into_iter(), &[-7, 0, 0]),
        Err(StoreError::BadReply(_))
    ));
}

#[test]
fn a_window_the_stores_clock_is_not_in_is_answered_with_the_stores() {
    assert_eq!(
        decode([0, 1].into_iter(), &[-3, 1_800, 0, -3, 1_860, 0]).unwrap(),
        [Answer::Elsewhere(1_800), Answer::Elsewhere(1_860)]
    );
    // Only windows are checked: a bucket's -3 is a bad reply.
    assert!(matches!(
        decode([2].into_iter(), &[-3, 5, 0]),
        Err(StoreError::BadReply(_))
    ));
}

/// A take Redis ran after its caller gave it up answers the count after
/// the request's own hits, marked late; only a fixed window's.
#[test]
fn a_late_take_is_answered_as_late() {
    assert_eq!(
        decode([0].into_iter(), &[12, -4, 0]).unwrap(),
        [Answer::Late(12)]
    );
    assert_eq!(
        decode([1].into_iter(), &[12, 4, 0]).unwrap(),
        [Answer::Counted(Tally::Sliding {
            current: 12,
            previous: 4
        })]
    );
}

/// Only a fixed window's take carries the take flag: a concurrency slot has
/// a slot argument and a lease too, and is sent as a slot.
#[test]
fn a_slot_is_sent_as_a_slot_and_a_take_as_a_take() {
    let now = crate::limiter::Now(1_000);
    let slot = Increment {
        algorithm: Algorithm::Concurrency,
        slot: Some("s1".into()),
        ..Increment::test_hit("c", 2, 1_000_000_000)
    };
    let op = Op::new(&slot, vec!["k".into(), "u".into()], now);
    assert_eq!(op.args[0], u64::from(Algorithm::Concurrency.tag()));
    let take = Increment {
        take: Some(crate::Take {
            own: 1,
            until_us: 1_000_000_100,
        }),
        ..Increment::test_hit("c", 2, 1_000_000_000)
    };
    let op = Op::new(&take, vec!["k".into()], now);
    assert_eq!(op.args[0], u64::from(Algorithm::FixedWindow.tag()) + TAKE);
}
