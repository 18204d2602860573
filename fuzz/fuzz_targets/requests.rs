//! cargo-fuzz entry for `fuzzing::requests` (see crates/fuzzing).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::requests::run(data));
