//! Counts of recent limited ranges, so that a paginated list pays for
//! its page and not for the rest of the range.
//!
//! A Range answer's `count` is every key in the range at the revision it
//! reads, whatever the limit, so a page of 500 from the start of a million
//! keys counts a million index entries. kube-apiserver lists a collection
//! that way: pages of 500, each starting after the last key of the page
//! before, all at the first page's revision. Counting each page anew made
//! the whole list cost the square of its size (etcd pays about 96 ms a
//! page at a million keys).
//!
//! What a range reads at a revision never changes: later writes have
//! higher revisions, and a compaction keeps every answer at or above the
//! compact revision (a read below it fails). So the count of `[k, end)` at
//! `at` is the count of `[k', end)` at `at` less the keys in `[k', k)` at
//! `at`, or plus those of `[k, k')` when `k` comes first. This cache keeps,
//! per range end and revision, the last start counted and its count; the
//! next page then counts only the keys between the two starts, which are
//! the previous page's. A gap of more than [`COUNT_GAP_STEPS_MAX`] index
//! entries is counted whole instead.
//!
//! The cache lives with the store's in-memory state and is replaced with
//! it by a restore.

use std::sync::Mutex;

/// Ranges whose counts are kept: lists in progress at once. kube-apiserver
/// lists each resource type on its own, and a large cluster has a few
/// hundred; each entry holds two keys (at most a request's bytes).
pub const COUNT_CACHE_ENTRIES: usize = 256;

/// Index entries counted between a cached start and a new one before the
/// range is counted whole instead: twenty of kube-apiserver's 500-key
/// pages, a few hundred microseconds of index walk.
pub const COUNT_GAP_STEPS_MAX: usize = 10_000;

/// Largest range end plus start kept, in bytes: keys of a few KiB at most
/// are worth caching; a larger pair is counted whole each time.
pub const COUNT_CACHE_KEY_BYTES_MAX: usize = 4096;

#[derive(Debug)]
struct Entry {
    range_end: Vec<u8>,
    at: i64,
    start: Vec<u8>,
    count: i64,
    used: u64,
}

/// The counts, least recently used first out.
#[derive(Debug, Default)]
pub struct CountCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: Vec<Entry>,
    clock: u64,
}

impl Inner {
    /// Ticks the clock and marks the entry for `range_end` at `at`, if
    /// any, as used now.
    fn touch(&mut self, range_end: &[u8], at: i64) -> Option<&mut Entry> {
        self.clock += 1;
        let clock = self.clock;
        let entry = self
            .entries
            .iter_mut()
            .find(|entry| entry.at == at && entry.range_end == range_end)?;
        entry.used = clock;
        Some(entry)
    }
}

impl CountCache {
    /// The last start counted for ranges ending at `range_end` read at
    /// `at`, with its count.
    pub fn lookup(&self, range_end: &[u8], at: i64) -> Option<(Vec<u8>, i64)> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let entry = inner.touch(range_end, at)?;
        Some((entry.start.clone(), entry.count))
    }

    /// Records that `[start, range_end)` at `at` holds `count` keys.
    pub fn record(&self, start: &[u8], range_end: &[u8], at: i64, count: i64) {
        if start.len() + range_end.len() > COUNT_CACHE_KEY_BYTES_MAX {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = inner.touch(range_end, at) {
            entry.start.clear();
            entry.start.extend_from_slice(start);
            entry.count = count;
            return;
        }
        let entry = Entry {
            range_end: range_end.to_vec(),
            at,
            start: start.to_vec(),
            count,
            used: inner.clock,
        };
        if inner.entries.len() < COUNT_CACHE_ENTRIES {
            inner.entries.push(entry);
        } else if let Some(oldest) = inner.entries.iter_mut().min_by_key(|entry| entry.used) {
            *oldest = entry;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_start_per_range_end_and_revision() {
        let cache = CountCache::default();
        assert_eq!(cache.lookup(b"z", 5), None);
        cache.record(b"a", b"z", 5, 100);
        cache.record(b"m", b"z", 5, 40);
        cache.record(b"a", b"z", 6, 101);
        assert_eq!(cache.lookup(b"z", 5), Some((b"m".to_vec(), 40)));
        assert_eq!(cache.lookup(b"z", 6), Some((b"a".to_vec(), 101)));
        assert_eq!(cache.lookup(b"y", 5), None);
    }

    #[test]
    fn drops_the_least_recently_used_when_full() {
        let cache = CountCache::default();
        for at in 0..COUNT_CACHE_ENTRIES as i64 {
            cache.record(b"a", b"z", at, at);
        }
        assert!(cache.lookup(b"z", 0).is_some(), "touching 0 makes 1 the oldest");
        cache.record(b"a", b"z", 1000, 7);
        assert_eq!(cache.lookup(b"z", 1), None);
        assert_eq!(cache.lookup(b"z", 0), Some((b"a".to_vec(), 0)));
        assert_eq!(cache.lookup(b"z", 1000), Some((b"a".to_vec(), 7)));
    }

    #[test]
    fn does_not_keep_huge_keys() {
        let cache = CountCache::default();
        cache.record(&vec![b'k'; COUNT_CACHE_KEY_BYTES_MAX], b"z", 1, 1);
        assert_eq!(cache.lookup(b"z", 1), None);
    }
}
