//! Any bytes as a RateLimitRequest message through the whole decision path
//! with the memory store: an answer or INVALID_ARGUMENT, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice::fuzzing::request(data);
});
