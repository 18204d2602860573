//! Counts of large ranges at the newest revision, kept exact by every
//! write, so that counting a collection again costs nothing.
//!
//! Kubernetes counts every resource's keys with a count-only range each
//! minute (kube-apiserver's stored-objects metric), and the first page of
//! every list carries the count of the whole collection. Counting walks
//! the index: about 60 ms for a million keys, at every call. Yet the
//! count of a range at the newest revision changes only when a key in it
//! is created or deleted; an update leaves it as it is. So the index
//! keeps, for the few large ranges counted lately, the count at its
//! newest revision, and moves each one by one whenever a put creates a
//! key in it or a delete removes one ([`LiveCounts::changed`], called by
//! the index under the store's write lock). A read at the newest revision
//! takes the count from here instead of walking; a read at any other
//! revision walks as before.
//!
//! Only ranges of at least [`LIVE_COUNT_MIN_KEYS`] keys are kept: a
//! smaller range walks in well under a millisecond, and each kept range
//! costs every create and delete two key comparisons. The counts live in
//! the index and are replaced with it by a restore; a rebuilt index starts
//! with none.

use parking_lot::Mutex;

/// Ranges kept at once. Each costs every create and delete two key
/// comparisons (about 10 ns), so 16 cost a write well under a
/// microsecond; a cluster has a handful of collections large enough to
/// be kept (pods, events, leases, endpoint slices, ...).
pub const LIVE_COUNT_RANGES: usize = 16;

/// Smallest count kept: 10,000 index entries walk in about half a
/// millisecond, cheaper than the bookkeeping a kept range adds to writes.
pub const LIVE_COUNT_MIN_KEYS: i64 = 10_000;

/// Largest start plus end kept, in bytes: a collection's prefix is tens
/// of bytes; a larger pair is walked each time.
pub const LIVE_COUNT_KEY_BYTES_MAX: usize = 4096;

/// One kept range: keys from `key`, before `end` (`None`: unbounded). The
/// index passes ranges the same way (a single key is never kept).
#[derive(Debug)]
struct Kept {
    key: Box<[u8]>,
    end: Option<Box<[u8]>>,
    count: i64,
    used: u64,
}

impl Kept {
    fn is(&self, key: &[u8], end: Option<&[u8]>) -> bool {
        *self.key == *key && self.end.as_deref() == end
    }

    fn contains(&self, candidate: &[u8]) -> bool {
        candidate >= &*self.key && self.end.as_deref().is_none_or(|end| candidate < end)
    }
}

/// The kept ranges, least recently used first out.
#[derive(Debug, Default)]
pub struct LiveCounts {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    kept: Vec<Kept>,
    clock: u64,
}

impl LiveCounts {
    /// The count of the range of `key` and `end` at the newest revision,
    /// if it is kept.
    pub fn lookup(&self, key: &[u8], end: Option<&[u8]>) -> Option<i64> {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let clock = inner.clock;
        let kept = inner.kept.iter_mut().find(|kept| kept.is(key, end))?;
        kept.used = clock;
        Some(kept.count)
    }

    /// Records that the range holds `count` keys at the newest revision
    /// (the caller walked it under the store's read lock, so no write
    /// came between), if it is large enough to keep.
    pub fn record(&self, key: &[u8], end: Option<&[u8]>, count: i64) {
        if count < LIVE_COUNT_MIN_KEYS || key.len() + end.map_or(0, <[u8]>::len) > LIVE_COUNT_KEY_BYTES_MAX {
            return;
        }
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let kept = Kept {
            key: key.into(),
            end: end.map(Into::into),
            count,
            used: inner.clock,
        };
        if let Some(same) = inner.kept.iter_mut().find(|old| old.is(key, end)) {
            *same = kept;
        } else if inner.kept.len() < LIVE_COUNT_RANGES {
            inner.kept.push(kept);
        } else if let Some(oldest) = inner.kept.iter_mut().min_by_key(|old| old.used) {
            *oldest = kept;
        }
    }

    /// A put created `key` (`delta` 1) or a delete removed it (-1): every
    /// kept range holding it moves by `delta`.
    pub fn changed(&mut self, key: &[u8], delta: i64) {
        for kept in &mut self.inner.get_mut().kept {
            if kept.contains(key) {
                kept.count += delta;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = LIVE_COUNT_MIN_KEYS;

    #[test]
    fn keeps_large_ranges_and_moves_them_with_creates_and_deletes() {
        let mut counts = LiveCounts::default();
        counts.record(b"/a/", Some(b"/a0"), MIN);
        counts.record(b"/", None, MIN + 5);
        counts.record(b"/b/", Some(b"/b0"), MIN - 1);
        counts.changed(b"/a/x", 1);
        counts.changed(b"/a0", 1);
        counts.changed(b"/a/y", -1);
        counts.changed(b"/a/z", 1);
        counts.changed(b"!", 1);
        assert_eq!(counts.lookup(b"/a/", Some(b"/a0")), Some(MIN + 1));
        assert_eq!(counts.lookup(b"/", None), Some(MIN + 7));
        assert_eq!(counts.lookup(b"/b/", Some(b"/b0")), None, "too small");
        assert_eq!(counts.lookup(b"/a/", None), None, "another end");
    }

    #[test]
    fn drops_the_least_recently_used_when_full() {
        let counts = LiveCounts::default();
        let key = |i: usize| format!("/{i:03}/").into_bytes();
        for i in 0..LIVE_COUNT_RANGES {
            counts.record(&key(i), None, MIN + i as i64);
        }
        assert!(counts.lookup(&key(0), None).is_some(), "0 is used now");
        counts.record(&key(999), None, MIN);
        assert_eq!(counts.lookup(&key(1), None), None);
        assert_eq!(counts.lookup(&key(0), None), Some(MIN));
        assert_eq!(counts.lookup(&key(999), None), Some(MIN));
        counts.record(&key(0), None, MIN + 3);
        assert_eq!(counts.lookup(&key(0), None), Some(MIN + 3), "re-recorded in place");
    }

    #[test]
    fn does_not_keep_huge_keys() {
        let counts = LiveCounts::default();
        let huge = vec![b'k'; LIVE_COUNT_KEY_BYTES_MAX];
        counts.record(&huge, Some(b"z"), MIN);
        assert_eq!(counts.lookup(&huge, Some(b"z")), None);
    }
}
