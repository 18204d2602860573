//! What the store reports as it works, for the server's metrics: each
//! write applied, each batch handed to sled and each step of compaction,
//! with how long they took.
//! The store depends on no metrics library; the server implements
//! [`Observer`] and sets it once with `Store::observe_with`.

use std::time::Duration;

use crate::error::Result;
use crate::request::{WriteRequest, WriteResponse};

pub trait Observer: Send + Sync {
    /// One write request applied: its answer, and its time.
    fn applied(&self, request: &WriteRequest, response: &Result<WriteResponse>, took: Duration);
    /// One batch of applied writes handed to sled, and its time.
    fn committed(&self, took: Duration);
    /// One step of queued compaction work (compaction.rs), and how long
    /// it held the state lock: the pause applies and reads saw. `index`
    /// for a step compacting the index; otherwise a step of the hash, the
    /// removals (`removed` revisions) or the reclaim of their space.
    fn compaction_step(&self, index: bool, removed: usize, took: Duration);
}
