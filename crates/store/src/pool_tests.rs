use super::*;

#[test]
fn a_checkout_that_timed_out_says_why_only_from_a_connect_in_its_wait() {
    let last = LastError::default();
    let timed_out = || bb8::RunError::<std::io::Error>::TimedOut;
    assert!(matches!(
        last.checkout(timed_out(), Duration::from_secs(1)),
        StoreError::Timeout
    ));
    bb8::ErrorSink::<String>::sink(&last, "Connection refused".into());
    match last.checkout(timed_out(), Duration::from_secs(1)) {
        StoreError::Unavailable(why) => assert_eq!(why, "Connection refused"),
        e => panic!("{e}"),
    }
    std::thread::sleep(Duration::from_millis(5));
    assert!(
        matches!(
            last.checkout(timed_out(), Duration::ZERO),
            StoreError::Timeout
        ),
        "an error from before the wait says nothing of it"
    );
}
