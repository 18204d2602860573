//! Handling one Ready top to bottom: a snapshot installed, entries and
//! hard state persisted through the WAL (its fdatasync the only wait),
//! messages sent, and committed entries handed to the apply stage, with a
//! bounded backlog when it lags.

use super::*;
use raft::prelude::Message;

use crate::member::courier::Delivery;

impl Node {
    /// Handles one Ready in the order raft-rs documents, with etcd's
    /// leader optimisation (Raft thesis §10.2.1). A fault ends it where it
    /// happens: nothing after a failed WAL write is sent or advanced.
    pub(super) fn handle_ready(&mut self) -> Result<(), Fatal> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();

        // 1. Messages first when they carry entries. On a leader these
        //    are appends, and sending them before our own fsync lets
        //    followers write in parallel with us; a leader's entry counts
        //    toward commit only once its own WAL has it, so this is safe.
        //    Messages without entries (a new commit index, heartbeats) go
        //    after step 3 (`send_after_apply`).
        let messages = ready.take_messages();
        let later = self.send_appends_first(messages);

        // 2. A snapshot from the leader, ahead of the entries after it.
        if !ready.snapshot().is_empty() {
            self.install_snapshot(&ready)?;
        }

        // 3. Committed entries go to the apply stage. They are durable on
        //    a quorum already, so applying them need not wait for our own
        //    fsync below.
        self.send_committed(ready.take_committed_entries())?;
        self.send_after_apply(later);

        // 4. New entries and the hard state: one WAL write and one
        //    fdatasync for the whole Ready.
        let early = crate::broken::ack_before_fsync();
        if early {
            self.outbox.send(ready.take_persisted_messages());
        }
        self.persist(&ready.take_entries(), ready.hs())?;

        // 5. Read states: each answers one round of reads once applied.
        for read_state in ready.take_read_states() {
            if let Some(waiters) = self.reads.answered(&read_state.request_ctx) {
                self.release_reads(read_state.index, waiters);
            }
        }

        // 6. Messages that may only leave after the fsync: a follower's
        //    append acknowledgements and votes.
        if !early {
            self.outbox.send(ready.take_persisted_messages());
        }

        // 7. Advance, then the light ready: commit index, more messages and
        //    committed entries.
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.durable.memory.wl().mut_hard_state().commit = commit;
        }
        let later = self.send_appends_first(light.take_messages());
        self.send_committed(light.take_committed_entries())?;
        self.send_after_apply(later);
        self.raw.advance_apply();
        self.maybe_snapshot();
        self.maybe_compact_log();
        let raft = &self.raw.raft;
        self.status.set_raft(raft.term, raft.leader_id, raft.raft_log.committed);
        self.events.leader(raft.leader_id, raft.term);
        Ok(())
    }

    /// Sends `messages` now if any carries entries, keeping their order;
    /// else returns them for [`Node::send_after_apply`].
    fn send_appends_first(&mut self, messages: Vec<Message>) -> Vec<Message> {
        if messages.iter().any(|message| !message.get_entries().is_empty()) {
            self.send(messages);
            return Vec::new();
        }
        messages
    }

    /// Sends messages that carry no entries once the Ready's committed
    /// entries are with the apply stage. On one core, each message sent
    /// wakes a peer's raft loop, which may run before this thread does
    /// again: the leader's own apply, which answers the writers, goes
    /// first, and the followers' turns for a new commit index wait.
    fn send_after_apply(&mut self, messages: Vec<Message>) {
        if !messages.is_empty() {
            self.send(messages);
        }
    }

    fn send(&mut self, messages: Vec<Message>) {
        self.events.sending(&messages, Instant::now());
        self.outbox.send(messages);
    }

    /// A snapshot from the leader: recorded in the WAL, handed to raft's
    /// log, and queued for the apply stage ahead of the entries that
    /// follow it, which restores the store from the pending file.
    pub(super) fn install_snapshot(&mut self, ready: &Ready) -> Result<(), Fatal> {
        let snapshot = ready.snapshot().clone();
        let metadata = snapshot.get_metadata();
        let (index, term) = (metadata.index, metadata.term);
        assert!(index > self.snapshot_index, "a leader's snapshot moves forward");
        if let Err(error) = self.durable.save_snapshot(index, term, metadata.get_conf_state()) {
            return Err(Fatal::new("WAL write failed", &error));
        }
        self.durable
            .memory
            .wl()
            .apply_snapshot(snapshot)
            .expect("a leader's snapshot is newer than our log");
        self.snapshot_index = index;
        self.next_to_apply = index + 1;
        self.send_apply(ApplyInput::Restore { index, term });
        Ok(())
    }

    /// Makes a Ready's entries and hard state durable. A failure stops the
    /// member: going on could acknowledge writes that are not on disk.
    pub(super) fn persist(&mut self, entries: &[Entry], hard_state: Option<&HardState>) -> Result<(), Fatal> {
        assert!(
            entries.windows(2).all(|pair| pair[1].index == pair[0].index + 1),
            "a Ready's entries are contiguous"
        );
        assert!(
            entries
                .first()
                .is_none_or(|first| first.index <= self.durable.memory.last_index().unwrap_or(0) + 1),
            "new entries leave no gap after the log"
        );
        assert!(
            hard_state.is_none_or(|hs| hs.commit >= self.durable.memory.rl().hard_state().commit),
            "the commit index never goes back"
        );
        tracing::debug!(entries = entries.len(), "ready");
        self.durable
            .persist(entries, hard_state)
            .map_err(|error| Fatal::new("WAL write failed", &error))
    }

    /// Releases a round of linearizable reads confirmed at `index`: at
    /// once if the store has applied that far (a member keeping up, the
    /// usual case), else through the apply stage, which releases them
    /// once it has. Answering here spares the apply stage's thread a
    /// wake-up per round; the condition is the one the stage checks.
    pub(super) fn release_reads(&mut self, index: u64, waiters: Vec<ReadWaiter>) {
        if self.status.applied() < index {
            return self.send_apply(ApplyInput::Read { index, waiters });
        }
        self.courier.send(
            waiters
                .into_iter()
                .map(|waiter| Delivery::Read(waiter, Ok(())))
                .collect(),
        );
    }

    pub(super) fn send_committed(&mut self, entries: Vec<Entry>) -> Result<(), Fatal> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        self.apply_conf_changes(&entries)?;
        assert_eq!(
            first.index, self.next_to_apply,
            "committed entries follow the last ones"
        );
        assert!(
            entries.windows(2).all(|pair| pair[1].index == pair[0].index + 1),
            "committed entries are contiguous"
        );
        self.next_to_apply = entries.last().map_or(self.next_to_apply, |last| last.index + 1);
        tracing::debug!(entries = entries.len(), "committed");
        self.send_apply(ApplyInput::Entries(entries));
        Ok(())
    }

    /// Hands `input` to the apply stage without waiting: what its full
    /// queue does not take waits in the backlog, in order, unless the
    /// backlog is at its bound.
    pub(super) fn send_apply(&mut self, input: ApplyInput) {
        if self.apply_backlog.is_empty() {
            match self.apply.try_send(input) {
                Ok(()) => return,
                Err(TrySendError::Full(input)) => self.apply_backlog.push_back(input),
                Err(TrySendError::Disconnected(_)) => return self.apply_stage_gone(),
            }
        } else {
            self.apply_backlog.push_back(input);
        }
        if self.apply_backlog.len() > APPLY_BACKLOG_MAX {
            tracing::warn!(
                inputs = self.apply_backlog.len(),
                "the apply stage is far behind; waiting for it"
            );
            if !self.hand_over_backlog() {
                self.apply_stage_gone();
            }
        }
    }

    /// The apply stage's queue is closed: the stage stopped on a fault of
    /// its own (which it raised), and nothing committed can be applied
    /// and answered any more.
    pub(super) fn apply_stage_gone(&mut self) {
        self.apply_backlog.clear();
        self.fail(Fatal::new("the apply stage stopped", &"its queue is closed"));
    }

    /// The apply stage gets the whole backlog, waiting for room: past the
    /// backlog's bound, and on stopping, so that what was committed is
    /// applied and answered. False if the stage has stopped.
    pub(super) fn hand_over_backlog(&mut self) -> bool {
        while let Some(input) = self.apply_backlog.pop_front() {
            if self.apply.send(input).is_err() {
                return false;
            }
        }
        true
    }

    /// Moves what the apply stage's queue now has room for out of the
    /// backlog.
    pub(super) fn drain_apply_backlog(&mut self) {
        while let Some(input) = self.apply_backlog.pop_front() {
            match self.apply.try_send(input) {
                Ok(()) => {}
                Err(TrySendError::Full(input)) => {
                    self.apply_backlog.push_front(input);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => return self.apply_stage_gone(),
            }
        }
    }
}
