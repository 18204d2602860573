//! cargo-fuzz entry for `fuzzing::wal_frames` (see crates/fuzzing).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::wal_frames::run(data));
