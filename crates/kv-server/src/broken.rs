//! Builds broken on purpose, to show the checks catch them: each is a
//! failpoint that, when armed, makes the member break one guarantee. They
//! are compiled out (each function returns false) unless the `failpoints`
//! feature is on, and armed only by a test or the simulator (`simulator
//! --break NAME`, `docs/robustness.md`).
//!
//! - `kv::stale_read`: linearizable reads skip the ReadIndex round and read
//!   whatever this member has applied.
//! - `kv::ack_before_fsync`: the raft loop sends the messages that must
//!   follow its fsync (a follower's append acknowledgements, its votes)
//!   before the WAL write.
//! - `kv::double_apply`: after a restart the raft loop hands the apply
//!   stage the last applied entry again, and the stage applies it.
//! - `kv::skip_read_term_check`: a leader that has not yet committed an
//!   entry of its term answers a ReadIndex round at once, with the commit
//!   index it has (which may be behind its predecessor's).
//! - `kv::watch_resume_skips`: a watcher created with a start revision in
//!   the past (a client resuming a broken watch) starts one revision
//!   later, so the changes at its start revision are never sent.

pub(crate) fn stale_read() -> bool {
    fail::fail_point!("kv::stale_read", |_| true);
    false
}

pub(crate) fn ack_before_fsync() -> bool {
    fail::fail_point!("kv::ack_before_fsync", |_| true);
    false
}

pub(crate) fn double_apply() -> bool {
    fail::fail_point!("kv::double_apply", |_| true);
    false
}

pub(crate) fn skip_read_term_check() -> bool {
    fail::fail_point!("kv::skip_read_term_check", |_| true);
    false
}

pub(crate) fn watch_resume_skips() -> bool {
    fail::fail_point!("kv::watch_resume_skips", |_| true);
    false
}
