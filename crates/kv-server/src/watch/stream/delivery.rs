//! What a stream sends its watchers: the changes the hub publishes,
//! matched and batched per watcher; catch-up from the store for a watcher
//! behind (or a stream that fell behind the hub); progress notifications.

use super::*;

/// The next message of the hub, if the stream holds a place in it.
pub(super) async fn next_published(
    hub: &mut Option<broadcast::Receiver<Arc<Published>>>,
) -> Result<Arc<Published>, broadcast::error::RecvError> {
    match hub {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The batch's events as the wire carries them, with their keys' previous
/// values if asked for (read once per batch for every watcher that asks).
pub(super) fn batch_wire<'a>(member: &Member, changes: &'a Changes, prev_kv: bool) -> &'a EventFields {
    let previous = |event: &mvcc::Event| {
        member
            .value_before(&event.kv.key, event.kv.mod_revision)
            .unwrap_or_default()
    };
    changes.wire(prev_kv.then_some(&previous as &PreviousValue))
}

/// History's events encoded, in responses of at most
/// `WATCH_MERGED_RESPONSE_BYTES_MAX` bytes past their last revision (a
/// revision's events stay together).
pub(super) fn responses_of(changes: impl Iterator<Item = (mvcc::Event, Option<mvcc::KeyValue>)>) -> Vec<Vec<Bytes>> {
    let mut responses = Vec::new();
    let (mut current, mut bytes, mut revision) = (Vec::new(), 0, 0);
    for (event, previous) in changes {
        if bytes >= WATCH_MERGED_RESPONSE_BYTES_MAX && event.kv.mod_revision != revision {
            responses.push(std::mem::take(&mut current));
            bytes = 0;
        }
        revision = event.kv.mod_revision;
        let field = event_field(&wire_event(event, previous));
        bytes += field.len();
        current.push(field);
    }
    if !current.is_empty() {
        responses.push(current);
    }
    responses
}

impl WatchStream {
    /// The hub's message `published` and those already waiting behind it,
    /// while the outbox has room.
    pub(super) async fn deliver_ready(
        &mut self,
        published: Arc<Published>,
        hub: &mut broadcast::Receiver<Arc<Published>>,
    ) -> Result<(), Gone> {
        self.deliver(&published).await?;
        while !self.out.is_full() {
            match hub.try_recv() {
                Ok(published) => self.deliver(&published).await?,
                Err(broadcast::error::TryRecvError::Lagged(missed)) => return self.fell_behind(missed).await,
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// The hub moved on past `missed` messages this stream had not read.
    pub(super) async fn fell_behind(&mut self, missed: u64) -> Result<(), Gone> {
        tracing::info!(
            missed,
            reason = "the hub moved on",
            "a watch stream fell behind the hub; catching up from history"
        );
        // Its watchers are etcd's unsynced ones while it catches up.
        let behind = self.watchers.len() as i64;
        metrics().mvcc.slow_watcher_total.add(behind);
        let caught_up = self.resync().await;
        metrics().mvcc.slow_watcher_total.sub(behind);
        caught_up
    }

    /// One applied batch: its events are matched to the stream's groups of
    /// watchers (`matcher.rs`), and each matched watcher's, as the batch's
    /// shared encodings, join what waits for it in the outbox.
    pub(super) async fn deliver(&mut self, published: &Published) -> Result<(), Gone> {
        let changes = match published {
            Published::Changes(changes) => changes,
            Published::Restored => return self.resync().await,
        };
        if changes.last <= self.synced_through {
            // Already read from history.
            return Ok(());
        }
        let events = match changes.events.as_ref() {
            Some(events) if changes.first <= self.synced_through + 1 => events,
            // Too large to carry (or, were batches ever out of order, a
            // gap): history has them all.
            _ => return self.catch_up_all(changes.last).await,
        };
        let gathered = self.gather_matched(changes, events);
        self.synced_through = changes.last;
        if !gathered.is_empty() {
            self.reported = self.reported.max(changes.last);
            self.out.gather(changes.last, gathered);
        }
        Ok(())
    }

    /// Each matched watcher's events of a batch that follows on from
    /// `synced_through`.
    pub(super) fn gather_matched(&mut self, changes: &Changes, events: &[mvcc::Event]) -> Vec<Gathered> {
        let base = self.synced_through + 1;
        // The groups hit, in the order first hit, with their events.
        let mut hits: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut hit_at: IdMap<usize, usize> = IdMap::default();
        let mut found = Vec::new();
        for (index, event) in events.iter().enumerate() {
            if event.kv.mod_revision < base {
                continue;
            }
            found.clear();
            self.matcher.matching(&event.kv.key, &mut found);
            for &group in &found {
                if !self.matcher.group(group).shape.wants_kind(event.kind) {
                    continue;
                }
                match hit_at.entry(group) {
                    Entry::Occupied(at) => hits[*at.get()].1.push(index),
                    Entry::Vacant(at) => {
                        at.insert(hits.len());
                        hits.push((group, vec![index]));
                    }
                }
            }
        }
        let mut gathered = Vec::new();
        for (group, indices) in hits {
            let group = self.matcher.group(group);
            let wire = batch_wire(&self.member, changes, group.shape.prev_kv);
            let all = wire.pick(&indices);
            for id in &group.watchers {
                let watcher = self.watchers.get_mut(id).expect("grouped watchers exist");
                let from = watcher.next.max(base);
                if from > changes.last {
                    continue;
                }
                watcher.next = changes.last + 1;
                let events = if from == base {
                    all.clone()
                } else {
                    let later: Vec<usize> = indices
                        .iter()
                        .copied()
                        .filter(|&index| events[index].kv.mod_revision >= from)
                        .collect();
                    wire.pick(&later)
                };
                if !events.is_empty() {
                    gathered.push(Gathered {
                        serial: watcher.serial,
                        watch_id: *id,
                        fragment: watcher.fragment,
                        events,
                    });
                }
            }
        }
        gathered
    }

    /// Every watcher reads what it missed from history, up to `to`.
    pub(super) async fn catch_up_all(&mut self, to: i64) -> Result<(), Gone> {
        let synced_next = self.synced_through + 1;
        for watcher in self.watchers.values_mut() {
            watcher.next = watcher.next.max(synced_next);
        }
        let ids: Vec<i64> = self.watchers.keys().copied().collect();
        for id in ids {
            self.catch_up(id, to).await?;
        }
        self.synced_through = self.synced_through.max(to);
        Ok(())
    }

    /// After the stream lost its place in the hub, or the store was
    /// replaced by a snapshot: every watcher reads what it missed from
    /// history, up to the store's revision now.
    pub(super) async fn resync(&mut self) -> Result<(), Gone> {
        let current = self.member.current_revision();
        self.catch_up_all(current).await
    }

    /// Sends watcher `id` every change from its next revision up to `to`,
    /// from the store's history, in pieces of [`WATCH_BATCH_REVISIONS`];
    /// cancels it as etcd does if its next revision was compacted away.
    pub(super) async fn catch_up(&mut self, id: i64, to: i64) -> Result<(), Gone> {
        loop {
            let Some(watcher) = self.watchers.get(&id) else {
                return Ok(());
            };
            if watcher.next > to {
                return Ok(());
            }
            let end = to.min(watcher.next.saturating_add(WATCH_BATCH_REVISIONS - 1));
            let shape = &watcher.shape;
            let changes = self
                .member
                .changes(&shape.key, &shape.range_end, watcher.next, end, shape.prev_kv);
            let changes = match changes {
                Ok(changes) => changes,
                Err(mvcc::Error::Compacted) => {
                    let watcher = self.watchers.remove(&id).expect("just read");
                    metrics().mvcc.watcher_total.dec();
                    self.matcher.remove(id, &watcher.shape);
                    self.out.forget(watcher.serial);
                    // etcd's compacted response carries no revision.
                    let response = pb::WatchResponse {
                        header: self.header(0),
                        watch_id: id,
                        compact_revision: self.member.compact_revision(),
                        canceled: true,
                        ..Default::default()
                    };
                    return self.send(response).await;
                }
                Err(error) => {
                    tracing::error!(%error, "watch: could not read history");
                    self.out.end(store_status(&error));
                    return Err(Gone);
                }
            };
            let pieces = responses_of(changes.into_iter().filter(|(event, _)| watcher.shape.wants(event)));
            if let Some(watcher) = self.watchers.get_mut(&id) {
                watcher.next = end + 1;
            }
            for events in pieces {
                self.send_events(id, to, events).await?;
            }
        }
    }

    /// Queues events for watcher `id` under a header at `revision`, once
    /// the outbox has room.
    pub(super) async fn send_events(&mut self, id: i64, revision: i64, events: Vec<Bytes>) -> Result<(), Gone> {
        self.out.room().await?;
        let Some(watcher) = self.watchers.get(&id) else {
            return Ok(());
        };
        let gathered = Gathered {
            serial: watcher.serial,
            watch_id: id,
            fragment: watcher.fragment,
            events,
        };
        self.reported = self.reported.max(revision);
        self.out.gather(revision, [gathered]);
        Ok(())
    }

    /// The first revision `watcher` has not been sent: its own next, or
    /// past every batch the stream has matched, whichever is later.
    pub(super) fn next_of(&self, watcher: &Watcher) -> i64 {
        watcher.next.max(self.synced_through + 1)
    }

    /// The revision every watcher has been sent everything up to.
    pub(super) fn synced_revision(&self) -> i64 {
        self.watchers
            .values()
            .map(|watcher| self.next_of(watcher) - 1)
            .min()
            .unwrap_or_else(|| self.member.current_revision())
    }

    /// Answers a pending progress request once every watcher has been
    /// sent everything up to the revision it waits for.
    pub(super) async fn send_progress_if_synced(&mut self) -> Result<(), Gone> {
        let Some(target) = self.progress_pending else {
            return Ok(());
        };
        if self.out.has_events() {
            return Ok(());
        }
        let synced = self.synced_revision().min(self.member.current_revision());
        if synced < target.max(self.reported) {
            return Ok(());
        }
        self.progress_pending = None;
        let response = pb::WatchResponse {
            header: self.header(synced),
            watch_id: INVALID_WATCH_ID,
            ..Default::default()
        };
        self.send(response).await
    }

    /// The periodic progress of watchers created with `progress_notify`:
    /// each hears the revision it has been sent everything up to, unless
    /// that is below a header this stream already sent (progress never
    /// goes back).
    pub(super) async fn notify_progress(&mut self) -> Result<(), Gone> {
        let current = self.member.current_revision();
        let reported = self.reported;
        let due: Vec<(i64, i64)> = self
            .watchers
            .iter()
            .filter(|(_, watcher)| watcher.progress_notify && !self.out.holds(watcher.serial))
            .map(|(id, watcher)| (*id, (self.next_of(watcher) - 1).min(current)))
            .filter(|(_, revision)| *revision >= reported)
            .collect();
        for (id, revision) in due {
            let response = pb::WatchResponse {
                header: self.header(revision),
                watch_id: id,
                ..Default::default()
            };
            self.send(response).await?;
        }
        Ok(())
    }
}
