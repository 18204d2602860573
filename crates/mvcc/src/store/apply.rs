//! Applying committed writes (one open batch, one new revision per write)
//! and serving reads at the current or an older revision, through the
//! index and the open batch.

use super::*;

/// `key`'s value at `revision - 1`, if it existed then and the revision
/// is not below the compact revision.
pub(super) fn previous_value(db: &sled::Db, state: &State, key: &[u8], revision: i64) -> Result<Option<KeyValue>> {
    let at = revision - 1;
    if at < state.compact_revision {
        return Ok(None);
    }
    match state.index.get(key, at) {
        Some(previous) => load_through(db, &state.values, &state.batch, previous).map(Some),
        None => Ok(None),
    }
}

impl ReadView for StoreView<'_> {
    fn revision(&self) -> i64 {
        self.state.current_revision
    }

    fn compact_revision(&self) -> i64 {
        self.state.compact_revision
    }

    fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        range::range(
            request,
            &self.state.index,
            self.state.current_revision,
            self.state.compact_revision,
            Some(&self.state.counts),
            |revisions, found| {
                load_many(
                    self.db,
                    &self.state.values,
                    &self.state.directory,
                    &self.state.batch,
                    revisions,
                    found,
                )
            },
        )
    }

    fn lease_exists(&self, id: i64) -> bool {
        self.state.leases.contains(id)
    }
}

impl StoreTxn<'_> {
    /// Deletes the lease's keys in key order, all under one revision, then
    /// the lease.
    pub(super) fn revoke_lease(&mut self, request: &LeaseRevokeRequest) -> Result<LeaseRevokeResponse> {
        let lease = self.state.leases.revoke(request.id).ok_or(Error::LeaseNotFound)?;
        for key in lease.keys {
            self.delete_range(&DeleteRangeRequest {
                key: key.into_vec(),
                ..DeleteRangeRequest::default()
            })?;
        }
        self.batch.writes.remove(&lease_key(request.id));
        Ok(LeaseRevokeResponse {
            revision: self.revision(),
        })
    }

    pub(super) fn load(&self, revision: Revision) -> Result<KeyValue> {
        load_through(self.db, &self.state.values, self.batch, revision)
    }

    /// The generation of a key the index knows is live, from its latest
    /// stored revision, read in place.
    fn stored_generation(&self, key: &[u8]) -> Result<Generation> {
        let latest = self
            .state
            .index
            .latest(key)
            .filter(|slot| !slot.is_tombstone())
            .ok_or_else(|| records::corrupt("a live key has no live revision in the index"))?;
        read_through(self.db, &self.state.values, self.batch, latest.revision(), |stored| {
            Generation::Live {
                created: stored.create_revision,
                version: stored.version,
            }
        })
    }

    /// The key's value now, if it exists.
    pub(super) fn live(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        match self.state.index.latest(key) {
            Some(slot) if !slot.is_tombstone() => self.load(slot.revision()).map(Some),
            _ => Ok(None),
        }
    }

    pub(super) fn next_revision(&mut self) -> Revision {
        let revision = Revision::new(self.begin + 1, self.changes);
        self.changes += 1;
        revision
    }

    pub(super) fn write(&mut self, revision: Revision, tombstone: bool, kv: KeyValue) {
        let record = Record::new(revision, tombstone, &kv);
        self.batch.bytes += record.value.len();
        self.batch.pending.insert(revision, self.batch.records.len());
        self.batch.records.push(record);
        let kind = if tombstone { EventKind::Delete } else { EventKind::Put };
        self.events.push(Event { kind, kv });
    }
}

impl ReadView for StoreTxn<'_> {
    fn revision(&self) -> i64 {
        self.begin + i64::from(self.changes > 0)
    }

    fn compact_revision(&self) -> i64 {
        self.state.compact_revision
    }

    /// A range inside a write txn is not bounded (wire.rs): every member
    /// applies it, and a refusal there would fail a txn that etcd
    /// applies (etcd builds the answer, then refuses to send it; the
    /// server makes the same check of the whole txn's answer).
    fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        let unbounded;
        let request = if request.answer_bytes_max.0 == u64::MAX {
            request
        } else {
            unbounded = RangeRequest {
                answer_bytes_max: AnswerBytesMax(u64::MAX),
                ..request.clone()
            };
            &unbounded
        };
        range::range(
            request,
            &self.state.index,
            self.revision(),
            self.state.compact_revision,
            None,
            |revisions, found| {
                load_many(
                    self.db,
                    &self.state.values,
                    &self.state.directory,
                    self.batch,
                    revisions,
                    found,
                )
            },
        )
    }

    fn lease_exists(&self, id: i64) -> bool {
        self.state.leases.contains(id)
    }
}

impl WriteTxn for StoreTxn<'_> {
    fn put(&mut self, request: &PutRequest) -> Result<PutResponse> {
        validate::check_put(request)?;
        if request.lease != crate::lease::NO_LEASE && !self.state.leases.contains(request.lease) {
            return Err(Error::LeaseNotFound);
        }
        // The index usually knows the key's generation. Where it does not
        // (a key rewritten more often than the index looks back, or cut by
        // a compaction: key_index.rs), the generation is read from the
        // latest stored revision in place; the previous key-value itself
        // is loaded only when the request needs it.
        let needs_previous = request.prev_kv || request.ignore_value || request.ignore_lease;
        let generation = match self.state.index.generation(&request.key) {
            _ if needs_previous => None,
            Generation::Unknown => Some(self.stored_generation(&request.key)?),
            known => Some(known),
        };
        let previous = match generation {
            Some(_) => None,
            None => self.live(&request.key)?,
        };
        if (request.ignore_value || request.ignore_lease) && previous.is_none() {
            return Err(Error::KeyNotFound);
        }
        let revision = self.next_revision();
        let (create_revision, version) = match (generation, &previous) {
            (Some(Generation::Live { created, version }), _) => (created, version + 1),
            (None, Some(previous)) => (previous.create_revision, previous.version + 1),
            _ => (revision.main, 1),
        };
        if cfg!(debug_assertions) {
            if let Some(known) = generation {
                let stored = self.live(&request.key)?.map(|p| (p.create_revision, p.version));
                let indexed = match known {
                    Generation::Live { created, version } => Some((created, version)),
                    _ => None,
                };
                assert_eq!(
                    indexed, stored,
                    "the index's generation of {:?} disagrees with storage",
                    request.key
                );
            }
        }
        let kv = KeyValue {
            key: request.key.clone(),
            create_revision,
            mod_revision: revision.main,
            version,
            value: match (&previous, request.ignore_value) {
                (Some(previous), true) => previous.value.clone(),
                _ => request.value.clone(),
            },
            lease: match (&previous, request.ignore_lease) {
                (Some(previous), true) => previous.lease,
                _ => request.lease,
            },
        };
        self.state.index.put(&request.key, revision);
        self.state.leases.attach(&request.key, kv.lease);
        self.write(revision, false, kv);
        Ok(PutResponse {
            revision: revision.main,
            prev_kv: if request.prev_kv { previous } else { None },
        })
    }

    fn delete_range(&mut self, request: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        validate::check_delete_range(request)?;
        let mut doomed = Vec::new();
        self.state.index.visit(
            &request.key,
            RangeEnd::parse(&request.range_end),
            i64::MAX,
            |key, revision| {
                doomed.push((key.to_vec(), revision));
                true
            },
        );
        let mut prev_kvs = Vec::new();
        for (key, previous) in &doomed {
            if request.prev_kv {
                prev_kvs.push(self.load(*previous)?);
            }
            let revision = self.next_revision();
            self.state.index.tombstone(key, revision);
            self.state.leases.detach(key);
            let tombstone = KeyValue {
                key: key.clone(),
                mod_revision: revision.main,
                ..KeyValue::default()
            };
            self.write(revision, true, tombstone);
        }
        Ok(DeleteRangeResponse {
            revision: self.revision(),
            deleted: doomed.len() as i64,
            prev_kvs,
        })
    }
}

impl Store {
    /// A serializable read at the current revision (or the request's).
    pub fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        self.check_usable()?;
        let state = self.state.read();
        let db = self.db.read();
        StoreView { state: &state, db: &db }.range(request)
    }

    /// A read-only txn (every operation a range: see
    /// [`TxnRequest::is_read_only`]) at the current revision: its compares
    /// and its chosen branch's ranges read one view, under the read lock,
    /// as etcd serves such a txn without raft. It creates no revision.
    pub fn read_txn(&self, request: &TxnRequest) -> Result<TxnResponse> {
        self.check_usable()?;
        let state = self.state.read();
        let db = self.db.read();
        let view = StoreView { state: &state, db: &db };
        let path = txn::plan(&view, request)?;
        txn::execute_read_only(&view, request, &path)
    }

    /// Every change to keys in the range of `key` and `range_end` (as a
    /// range request reads them) at main revisions `from..=to`, in
    /// revision order, each with the key's previous value when `prev_kv`:
    /// what a watcher that is behind the store still has to see. Read from
    /// the revision space under the read lock, so a compaction cannot cut
    /// it short. Fails with [`Error::Compacted`] when `from` is below the
    /// compact revision, as etcd's watchers are cancelled then. The caller
    /// bounds `to - from`: the scan visits every change in between.
    pub fn changes(
        &self,
        key: &[u8],
        range_end: &[u8],
        from: i64,
        to: i64,
        prev_kv: bool,
    ) -> Result<Vec<(Event, Option<KeyValue>)>> {
        self.check_usable()?;
        let state = self.state.read();
        if from < state.compact_revision {
            return Err(Error::Compacted);
        }
        let to = to.min(state.current_revision);
        let mut changes = Vec::new();
        if from > to {
            return Ok(changes);
        }
        let end = RangeEnd::parse(range_end);
        let db = self.db.read();
        visit_through(
            &db,
            &state.values,
            &state.batch,
            Revision::new(from, 0),
            to,
            |revision, tombstone, kv| {
                if !end.contains(key, &kv.key) {
                    return Ok(());
                }
                let previous = if prev_kv {
                    previous_value(&db, &state, &kv.key, revision.main)?
                } else {
                    None
                };
                let kind = if tombstone { EventKind::Delete } else { EventKind::Put };
                changes.push((Event { kind, kv }, previous));
                Ok(())
            },
        )?;
        Ok(changes)
    }

    /// `key`'s value just before main revision `revision`, if it existed
    /// then and is not compacted away: a watch event's `prev_kv`.
    pub fn value_before(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>> {
        self.check_usable()?;
        let state = self.state.read();
        previous_value(&self.db.read(), &state, key, revision)
    }

    /// Applies the requests of one raft batch, in order, into the open
    /// batch, which then records `raft_index` as the consistent index. Each
    /// request gets its answer and the events it caused. A request that
    /// fails its checks changes nothing and answers its error. When the
    /// open batch is due, sled gets it, atomically (see the module docs).
    ///
    /// Nothing is flushed here: the WAL is the durable source, so after a
    /// crash the store may be behind, and the server replays the WAL
    /// entries after [`Store::consistent_index`]. See [`Store::flush`].
    pub fn apply(&self, raft_index: u64, requests: &[WriteRequest]) -> Result<Vec<Applied>> {
        self.check_usable()?;
        let mut state = self.state.write();
        // Tests stall the store here, its lock held (`mvcc::apply=…`).
        fail::fail_point!("mvcc::apply");
        let before = state.position("apply");
        assert!(
            raft_index >= before.consistent_index,
            "raft index {raft_index} goes back from {}",
            before.consistent_index
        );
        let mut batch = std::mem::take(&mut state.batch);
        batch.opened.get_or_insert_with(Instant::now);
        let mut results = Vec::with_capacity(requests.len());
        let observer = self.observer.get();
        for request in requests {
            let started = observer.map(|_| Instant::now());
            let applied = self.apply_one(&mut state, &mut batch, request);
            if let (Some(observer), Some(started)) = (observer, started) {
                observer.applied(request, &applied.response, started.elapsed());
            }
            results.push(applied);
        }
        state.batch = batch;
        state.consistent_index = raft_index;
        let after = state.position("apply");
        assert!(
            after.current_revision >= before.current_revision && after.compact_revision >= before.compact_revision,
            "apply at index {raft_index} moved revisions back: {before:?} to {after:?}"
        );
        let membership_changed = requests.iter().any(|r| matches!(r, WriteRequest::Membership(_)));
        self.publish(&state, membership_changed);
        if state.batch.is_due() {
            commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
        }
        Ok(results)
    }

    /// Why `request` is refused before it is applied, if it is: it is
    /// not valid, or it adds data while a NOSPACE alarm is raised (etcd's
    /// capped applier: refused here too, not only when it arrives, so one
    /// checked just before the alarm was raised does not slip through;
    /// every member applies the alarm at the same index, so every member
    /// refuses the same writes).
    pub(super) fn refusal(&self, state: &State, request: &WriteRequest) -> Option<Error> {
        if let Err(error) = validate::check_write(request, self.max_txn_ops) {
            return Some(error);
        }
        let no_space = state.alarms.iter().any(|alarm| alarm.kind == ALARM_NOSPACE);
        (no_space && adds_data(request)).then_some(Error::NoSpace)
    }

    pub(super) fn apply_one(&self, state: &mut State, batch: &mut Batch, request: &WriteRequest) -> Applied {
        if let Some(error) = self.refusal(state, request) {
            return Applied {
                response: Err(error),
                events: Vec::new(),
            };
        }
        match request {
            WriteRequest::Compaction(compaction) => {
                return Applied {
                    response: self.compact(state, compaction).map(WriteResponse::Compaction),
                    events: Vec::new(),
                }
            }
            WriteRequest::LeaseGrant(grant) => {
                return Applied {
                    response: grant_lease(state, batch, grant).map(WriteResponse::LeaseGrant),
                    events: Vec::new(),
                }
            }
            WriteRequest::LeaseCheckpoint(checkpoint) => {
                let persist = self.persist_lease_checkpoints.load(Ordering::Relaxed);
                return Applied {
                    response: Ok(checkpoint_leases(state, batch, checkpoint, persist)),
                    events: Vec::new(),
                };
            }
            WriteRequest::Membership(record) | WriteRequest::Auth(record) => {
                return keep_record(state, batch, request, record);
            }
            WriteRequest::Alarm(request) => {
                let response = change_alarm(state, batch, request);
                self.alarm_kinds.store(kinds_of(&state.alarms), Ordering::Release);
                return Applied {
                    response: Ok(WriteResponse::Alarm(response)),
                    events: Vec::new(),
                };
            }
            _ => {}
        }
        let db = self.db.read();
        let mut txn = StoreTxn {
            begin: state.current_revision,
            changes: 0,
            state,
            db: &db,
            batch,
            events: Vec::new(),
        };
        let response = match request {
            WriteRequest::Put(put) => txn.put(put).map(WriteResponse::Put),
            WriteRequest::DeleteRange(delete) => txn.delete_range(delete).map(WriteResponse::DeleteRange),
            WriteRequest::Txn(request) => {
                txn::plan(&txn, request).map(|path| WriteResponse::Txn(txn::execute(&mut txn, request, &path)))
            }
            WriteRequest::LeaseRevoke(revoke) => txn.revoke_lease(revoke).map(WriteResponse::LeaseRevoke),
            WriteRequest::Compaction(_)
            | WriteRequest::LeaseGrant(_)
            | WriteRequest::LeaseCheckpoint(_)
            | WriteRequest::Alarm(_)
            | WriteRequest::Membership(_)
            | WriteRequest::Auth(_) => {
                unreachable!("handled above")
            }
        };
        let revision = txn.revision();
        let events = std::mem::take(&mut txn.events);
        state.current_revision = revision;
        Applied { response, events }
    }
}
