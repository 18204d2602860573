//! One watcher of a stream: a key or range, followed from a revision on,
//! with etcd's filters and options.

/// One watcher of a stream.
pub struct Watcher {
    /// Unique on its stream, unlike the watch id a client may reuse.
    pub serial: u64,
    pub key: Vec<u8>,
    /// As a range request's: empty for the key alone, `[0]` for every key
    /// from `key` on.
    pub range_end: Vec<u8>,
    /// The first revision this watcher has not been sent yet.
    pub next: i64,
    pub prev_kv: bool,
    pub no_put: bool,
    pub no_delete: bool,
    pub fragment: bool,
    pub progress_notify: bool,
}

impl Watcher {
    /// Whether the watcher wants `event`: its key is in the range, and no
    /// filter drops its kind.
    pub fn wants(&self, event: &mvcc::Event) -> bool {
        let kind_wanted = match event.kind {
            mvcc::EventKind::Put => !self.no_put,
            mvcc::EventKind::Delete => !self.no_delete,
        };
        kind_wanted && mvcc::index::RangeEnd::parse(&self.range_end).contains(&self.key, &event.kv.key)
    }
}
