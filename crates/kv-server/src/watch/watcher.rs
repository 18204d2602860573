//! One watcher of a stream: a key or range, followed from a revision on,
//! with etcd's filters and options.

/// What a watcher watches, and what makes watchers share a group
/// (`matcher.rs`): watchers of the same shape match the same events and
/// are sent the same encodings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub key: Vec<u8>,
    /// As a range request's: empty for the key alone, `[0]` for every key
    /// from `key` on.
    pub range_end: Vec<u8>,
    pub no_put: bool,
    pub no_delete: bool,
    pub prev_kv: bool,
}

impl Shape {
    /// Whether an event of this kind passes the filters.
    pub fn wants_kind(&self, kind: mvcc::EventKind) -> bool {
        match kind {
            mvcc::EventKind::Put => !self.no_put,
            mvcc::EventKind::Delete => !self.no_delete,
        }
    }

    /// Whether `event` is watched: its key is in the range, and no filter
    /// drops its kind.
    pub fn wants(&self, event: &mvcc::Event) -> bool {
        self.wants_kind(event.kind) && mvcc::index::RangeEnd::parse(&self.range_end).contains(&self.key, &event.kv.key)
    }
}

/// One watcher of a stream.
pub struct Watcher {
    /// Unique on its stream, unlike the watch id a client may reuse.
    pub serial: u64,
    pub shape: Shape,
    /// The first revision this watcher has not been sent yet.
    pub next: i64,
    pub fragment: bool,
    pub progress_notify: bool,
}
