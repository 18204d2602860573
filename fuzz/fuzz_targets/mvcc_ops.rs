//! cargo-fuzz entry for `fuzzing::mvcc_ops` (see crates/fuzzing).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::mvcc_ops::run(data));
