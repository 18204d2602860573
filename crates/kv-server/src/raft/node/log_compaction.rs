//! Snapshots and the in-memory log: a snapshot once enough entries are
//! applied, and the log compacted behind the catch-up window.

use super::*;

/// Whether the in-memory log, whose first entry is `first`, holds
/// [`LOG_COMPACTION_INTERVAL_ENTRIES`] or more applied entries beyond the
/// `window` kept behind `applied`.
pub(super) fn log_compaction_due(applied: u64, first: u64, window: u64) -> bool {
    applied >= first + window + LOG_COMPACTION_INTERVAL_ENTRIES
}

/// The first entry the in-memory log keeps: `window` entries behind
/// `applied`, and never index 0 (raft's dummy entry).
pub(super) fn first_kept(applied: u64, window: u64) -> u64 {
    applied.saturating_sub(window).max(1)
}

impl Node {
    /// Every `--snapshot-count` applied entries: asks the apply stage to
    /// flush the store, and once it has (`snapshot_flushed`), records a
    /// snapshot there. The loop itself never waits for the store.
    pub(super) fn maybe_snapshot(&mut self) {
        let applied = self.status.applied();
        let count = self.config.snapshot_count.max(1);
        if self.flush_pending.is_some() || applied < self.snapshot_index + count {
            return;
        }
        let Ok(term) = self.log.term(applied) else { return };
        self.flush_pending = Some(std::time::Instant::now());
        self.send_apply(ApplyInput::Flush { index: applied, term });
    }

    /// The store is durable through `index`: records a snapshot there in
    /// the WAL and the marker, releases the WAL segments replay no longer
    /// needs, and compacts raft's in-memory log, keeping some entries for
    /// followers slightly behind. The line it logs gives the store's
    /// flush (from the request to its answer: the apply stage's queue and
    /// the flush) and the loop's own part apart, as either holds up
    /// writes: the flush the applies behind it, the rest this loop's turn.
    pub(super) fn snapshot_flushed(&mut self, index: u64, term: u64) {
        let asked = self.flush_pending.take();
        if index <= self.snapshot_index {
            return;
        }
        let started = std::time::Instant::now();
        let flush = asked.map_or(std::time::Duration::ZERO, |asked| {
            started.saturating_duration_since(asked)
        });
        let conf_state = self.log.conf_state();
        if let Err(error) = self.durable.save_snapshot(index, term, &conf_state) {
            return self.fail(Fatal::new("WAL write failed", &error));
        }
        if let Err(error) = self.marker.record(index, term) {
            return self.fail(Fatal::new("the snapshot marker could not be written", &error));
        }
        let released = match self.durable.release_to(index) {
            Ok(released) => released,
            Err(error) => return self.fail(Fatal::new("the WAL could not release segments", &error)),
        };
        self.compact_log(index);
        self.snapshot_index = index;
        tracing::info!(
            index,
            term,
            released,
            flush = %crate::logging::go_duration(flush),
            took = %crate::logging::go_duration(started.elapsed()),
            "took a snapshot"
        );
    }

    /// Every [`LOG_COMPACTION_INTERVAL_ENTRIES`] applied entries, drops
    /// the in-memory entries behind the catch-up window.
    pub(super) fn maybe_compact_log(&mut self) {
        let Ok(first) = self.log.first_index() else { return };
        let applied = self.status.applied();
        if log_compaction_due(applied, first, self.catch_up_window()) {
            self.compact_log(applied);
        }
    }

    /// Entries kept behind the applied index: the catch-up setting, but
    /// never more than `--snapshot-count`.
    pub(super) fn catch_up_window(&self) -> u64 {
        self.config.catch_up_entries.min(self.config.snapshot_count.max(1))
    }

    pub(super) fn compact_log(&mut self, applied: u64) {
        let first_kept = first_kept(applied, self.catch_up_window());
        if let Err(error) = self.log.compact(first_kept) {
            tracing::warn!(%error, "could not compact the in-memory log");
        }
    }
}

#[cfg(test)]
mod compaction_tests {
    use super::*;

    // Goal: the in-memory log is compacted once it holds an interval of
    // applied entries past the window, and keeps exactly the window.
    #[test]
    fn the_log_keeps_the_catch_up_window() {
        let window = SNAPSHOT_CATCH_UP_ENTRIES_DEFAULT;
        let interval = LOG_COMPACTION_INTERVAL_ENTRIES;
        assert!(!log_compaction_due(window + interval, 1, window));
        assert!(log_compaction_due(window + interval + 1, 1, window));
        assert_eq!(first_kept(window + interval + 1, window), interval + 1);
        // After compacting, the next one waits for another interval.
        let first = first_kept(20_000, window);
        assert!(!log_compaction_due(20_000 + interval - 1, first, window));
        assert!(log_compaction_due(20_000 + interval, first, window));
        // A young log is never compacted below index 1.
        assert_eq!(first_kept(3, window), 1);
    }
}
