//! Any bytes as a rule file: loading must answer Ok or errors, never panic
//! or hang, and whatever loads must match without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice::fuzzing::config(data);
});
