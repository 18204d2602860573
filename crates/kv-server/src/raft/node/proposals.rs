//! What a turn takes in: proposals (held while no leader is usable, and
//! refused when they cannot wait), read requests, peer messages and
//! membership changes, stepped into the RawNode.

use super::*;

impl Node {
    /// Whoever waits on a held proposal hears that the member stopped
    /// (through the apply stage, if it still runs).
    pub(super) fn refuse_held(&mut self) {
        for (_, input) in std::mem::take(&mut self.held) {
            self.refuse(input, RequestError::Stopped);
        }
    }

    /// Whether proposals can go to a leader: one is known, and it is a
    /// voter (a leader that removed itself drops what it is sent).
    pub(super) fn leader_usable(&self) -> bool {
        let raft = &self.raw.raft;
        raft.leader_id != raft::INVALID_ID
            && (raft.leader_id == self.config.id || raft.prs().conf().voters().contains(raft.leader_id))
    }

    /// Proposes what was held once a leader is usable; answers "no leader"
    /// for what waited longer than `leader_wait`.
    pub(super) fn release_held(&mut self, now: Instant) {
        if self.held.is_empty() {
            return;
        }
        if self.leader_usable() {
            for (_, input) in std::mem::take(&mut self.held) {
                self.take(input, now);
            }
            self.propose_pending();
            return;
        }
        while let Some((arrived, _)) = self.held.front() {
            if now.duration_since(*arrived) < self.config.leader_wait {
                break;
            }
            let (_, input) = self.held.pop_front().expect("checked");
            self.refuse(input, RequestError::NoLeader);
        }
    }

    /// Answers a proposal with `error`.
    pub(super) fn refuse(&mut self, input: NodeInput, error: RequestError) {
        match input {
            NodeInput::Propose { sequence, .. } | NodeInput::ProposeConfChange { sequence, .. } => {
                self.send_apply(ApplyInput::Dropped { sequence, error });
            }
            _ => unreachable!("only proposals are held"),
        }
    }

    /// Takes one turn's inputs. Peer messages are stepped first and the
    /// turn's proposals go to raft afterwards as one message, so that
    /// their appends (one per follower) carry whatever commit index the
    /// messages advanced; meanwhile raft need
    /// not broadcast that commit on its own (TiKV's toggle). A turn
    /// without proposals broadcasts commits as usual.
    pub(super) fn take_turn(&mut self, turn: &mut Vec<NodeInput>, now: Instant) {
        let proposing = self.leader_usable() && turn.iter().any(|input| matches!(input, NodeInput::Propose { .. }));
        self.raw.skip_bcast_commit(proposing);
        for input in turn.drain(..) {
            if self.fault.is_some() {
                // The member is stopping: what is left of the turn is
                // dropped with the loop.
                continue;
            }
            self.take(input, now);
        }
        self.propose_pending();
        self.raw.skip_bcast_commit(false);
    }

    /// Proposes the turn's writes as one raft message (one append per
    /// follower instead of one per write); if raft drops it, each of its
    /// waiters hears why.
    pub(super) fn propose_pending(&mut self) {
        if self.proposals.is_empty() {
            return;
        }
        let mut message = raft::prelude::Message::default();
        message.set_msg_type(raft::prelude::MessageType::MsgPropose);
        message.from = self.config.id;
        let entries: Vec<Entry> = self
            .proposals
            .iter_mut()
            .map(|(_, data)| Entry {
                data: std::mem::take(data).into(),
                ..Entry::default()
            })
            .collect();
        message.set_entries(entries.into());
        if let Err(error) = self.raw.raft.step(message) {
            tracing::debug!(%error, count = self.proposals.len(), "proposals dropped");
            let error = if self.raw.raft.leader_id == raft::INVALID_ID {
                RequestError::NoLeader
            } else {
                RequestError::LeaderChanged
            };
            for (sequence, _) in std::mem::take(&mut self.proposals) {
                self.send_apply(ApplyInput::Dropped {
                    sequence,
                    error: error.clone(),
                });
            }
        }
        self.proposals.clear();
    }

    /// Takes one input that arrived by `now`.
    pub(super) fn take(&mut self, input: NodeInput, now: Instant) {
        let proposal = matches!(input, NodeInput::Propose { .. } | NodeInput::ProposeConfChange { .. });
        if proposal && !self.leader_usable() {
            if self.held.len() >= HELD_PROPOSALS_MAX {
                self.refuse(input, RequestError::NoLeader);
            } else {
                self.held.push_back((now, input));
            }
            return;
        }
        match input {
            NodeInput::Propose { sequence, data } => {
                if self.proposals.len() >= INPUTS_PER_READY_MAX {
                    self.propose_pending();
                }
                self.proposals.push((sequence, data));
            }
            NodeInput::ProposeConfChange { sequence, change } => self.propose_conf_change(sequence, change),
            NodeInput::Progress { reply } => {
                let raft = &self.raw.raft;
                let progress = if raft.state == StateRole::Leader {
                    raft.prs()
                        .iter()
                        .map(|(id, progress)| (*id, progress.matched))
                        .collect()
                } else {
                    Vec::new()
                };
                let _ = reply.send(progress);
            }
            NodeInput::ReadIndex { reply } => self.reads.push(reply),
            NodeInput::Message(message) => self.step(*message),
            NodeInput::Messages(messages) => {
                for message in messages {
                    self.step(message);
                }
            }
            NodeInput::Unreachable(peer) => self.raw.report_unreachable(peer),
            NodeInput::TransferLeader(to) => self.raw.transfer_leader(to),
            NodeInput::AdvanceTicks(ticks) => {
                for _ in 0..ticks {
                    self.raw.tick();
                }
            }
            NodeInput::Stop(done) => self.stop = Some(done),
            NodeInput::Flushed { index, term } => self.snapshot_flushed(index, term),
            NodeInput::SnapshotStatus { to, failed } => {
                let status = if failed {
                    SnapshotStatus::Failure
                } else {
                    SnapshotStatus::Finish
                };
                self.raw.report_snapshot(to, status);
            }
        }
    }

    pub(super) fn step(&mut self, message: raft::prelude::Message) {
        if let Err(error) = self.raw.step(message) {
            tracing::debug!(%error, "peer message refused");
        }
    }

    /// Proposes a membership change. Raft takes one at a time: while one
    /// is unapplied, raft would turn another into an empty entry, and its
    /// client would wait in vain, so it is refused here as etcd's client
    /// would see it end, timed out.
    pub(super) fn propose_conf_change(&mut self, sequence: u64, change: ConfChange) {
        let error = if self.raw.raft.has_pending_conf() {
            Some(RequestError::TimedOut)
        } else if let Err(error) = self.raw.propose_conf_change(Vec::new(), change) {
            tracing::debug!(%error, "membership change dropped");
            Some(if self.raw.raft.leader_id == raft::INVALID_ID {
                RequestError::NoLeader
            } else {
                RequestError::LeaderChanged
            })
        } else {
            None
        };
        if let Some(error) = error {
            self.send_apply(ApplyInput::Dropped { sequence, error });
        }
    }

    /// Applies the committed configuration changes among `entries` to
    /// raft, unless refused (see `membership::conf_change_refused`; the
    /// apply stage refuses the same ones), and keeps raft's storage's
    /// configuration in step for the snapshots it records.
    pub(super) fn apply_conf_changes(&mut self, entries: &[Entry]) -> Result<(), Fatal> {
        for entry in entries {
            if entry.get_entry_type() != EntryType::EntryConfChange {
                continue;
            }
            let change = ConfChange::parse_from_bytes(&entry.data).expect("committed conf changes decode");
            let conf = self.raw.raft.prs().conf().to_conf_state();
            if conf_change_refused(&conf, &change) {
                tracing::info!(
                    index = entry.index,
                    node = change.node_id,
                    "refused a membership change"
                );
                continue;
            }
            match self.raw.apply_conf_change(&change) {
                Ok(conf) => self.durable.memory.wl().set_conf_state(conf),
                Err(error) => return Err(Fatal::new("raft refused a membership change", &error)),
            }
        }
        Ok(())
    }
}
