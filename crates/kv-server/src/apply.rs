//! The apply stage: a thread apart from the raft loop that applies
//! committed entries to the store in batches, answers the clients waiting
//! on them, and releases linearizable reads once the member has applied
//! up to their read index.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use prost::Message as _;
use raft::prelude::{Entry, EntryType};

use crate::convert;
use crate::proto::kvserverpb::{raft_request::Request, MemberAttributes, RaftRequest};
use crate::state::{ClientUrls, MemberState, ReadWaiter};
use crate::watch_hub::Published;

/// Capacity of the queue from the raft loop, in batches of entries. A
/// batch is one Ready's committed entries; 64 of them let raft run ahead
/// of the store by a burst, and then the raft loop waits.
pub const APPLY_QUEUE_CAPACITY: usize = 64;

/// Where published member attributes are kept, inside the data directory.
pub const ATTRIBUTES_FILE: &str = "member/attributes.json";

pub enum ApplyInput {
    Entries(Vec<Entry>),
    /// A snapshot from the leader: replaces the store's contents with the
    /// pending snapshot file at `path` (see `snapshot_transfer.rs`).
    Restore {
        index: u64,
        term: u64,
        path: PathBuf,
    },
    Read {
        index: u64,
        waiters: Vec<ReadWaiter>,
    },
}

pub fn run(state: Arc<MemberState>, inputs: Receiver<ApplyInput>) {
    let mut reads: Vec<(u64, Vec<ReadWaiter>)> = Vec::new();
    state
        .applied_index
        .store(state.store.consistent_index(), Ordering::Release);
    state.applied.notify_waiters();
    for input in inputs {
        match input {
            ApplyInput::Entries(entries) => apply_entries(&state, entries),
            ApplyInput::Restore { index, term, path } => restore(&state, index, term, &path),
            ApplyInput::Read { index, waiters } => reads.push((index, waiters)),
        }
        let applied = state.applied_index.load(Ordering::Acquire);
        reads.retain_mut(|(index, waiters)| {
            if *index > applied {
                return true;
            }
            for waiter in waiters.drain(..) {
                let _ = waiter.send(Ok(()));
            }
            false
        });
    }
}

fn apply_entries(state: &MemberState, entries: Vec<Entry>) {
    let Some(last_index) = entries.last().map(|e| e.index) else {
        return;
    };
    let already = state.store.consistent_index();
    // Requests go to the store by move; `outcomes` keeps, in entry order,
    // who waits and whether the request was refused before the store.
    let mut requests = Vec::new();
    let mut outcomes: Vec<(Option<u64>, Option<mvcc::Error>)> = Vec::new();
    for entry in &entries {
        if entry.index <= already || entry.data.is_empty() {
            continue;
        }
        if entry.get_entry_type() != EntryType::EntryNormal {
            tracing::warn!(index = entry.index, "ignoring a membership change entry");
            continue;
        }
        let request = RaftRequest::decode(&entry.data[..]).expect("committed entries decode");
        let owner = (request.member == state.member_id()).then_some(request.sequence);
        let write = match request.request {
            Some(Request::Put(put)) => Ok(mvcc::WriteRequest::Put(convert::put_request(put))),
            Some(Request::DeleteRange(delete)) => {
                Ok(mvcc::WriteRequest::DeleteRange(convert::delete_range_request(delete)))
            }
            Some(Request::Txn(txn)) => convert::txn_request(txn).map(mvcc::WriteRequest::Txn),
            Some(Request::Compaction(compaction)) => Ok(mvcc::WriteRequest::Compaction(mvcc::CompactionRequest {
                revision: compaction.revision,
            })),
            Some(Request::LeaseGrant(grant)) => Ok(mvcc::WriteRequest::LeaseGrant(mvcc::LeaseGrantRequest {
                id: grant.id,
                ttl: grant.ttl,
            })),
            Some(Request::LeaseRevoke(revoke)) => Ok(mvcc::WriteRequest::LeaseRevoke(mvcc::LeaseRevokeRequest {
                id: revoke.id,
            })),
            Some(Request::Attributes(attributes)) => {
                publish(state, attributes);
                continue;
            }
            None => continue,
        };
        match write {
            Ok(request) => {
                requests.push(request);
                outcomes.push((owner, None));
            }
            Err(error) => outcomes.push((owner, Some(error))),
        }
    }
    if last_index <= already {
        return;
    }
    // Tests stall the apply stage here (`kv::apply=1*sleep(ms)`) to hold
    // the applied index still while raft commits more.
    fail::fail_point!("kv::apply");
    let first = state.store.current_revision() + 1;
    let mut applied = match state.store.apply(last_index, &requests) {
        Ok(applied) => applied,
        Err(error) => {
            tracing::error!(%error, "the store failed to apply committed entries; stopping the member");
            std::process::exit(1);
        }
    };
    // The leader's lease deadlines follow grants and revocations.
    for (request, result) in requests.iter().zip(&applied) {
        match (request, &result.response) {
            (mvcc::WriteRequest::LeaseGrant(grant), Ok(_)) => state.lessor.granted(grant.id, grant.ttl),
            (mvcc::WriteRequest::LeaseRevoke(revoke), Ok(_)) => state.lessor.revoked(revoke.id),
            _ => {}
        }
    }
    // Watchers hear of the changes before the writers are answered, as
    // etcd notifies them when the write's transaction ends.
    let last = state.store.current_revision();
    if last >= first {
        let events = applied
            .iter_mut()
            .flat_map(|result| std::mem::take(&mut result.events))
            .collect();
        state.watch_hub.publish_changes(first, last, events);
    }
    let mut applied = applied.into_iter();
    for (owner, refused) in outcomes {
        let result = match refused {
            None => applied.next().expect("one result per request"),
            Some(error) => mvcc::Applied {
                response: Err(error),
                events: Vec::new(),
            },
        };
        if let Some(sequence) = owner {
            state.answer(sequence, Ok(result));
        }
    }
    state.applied_index.store(last_index, Ordering::Release);
    state.applied.notify_waiters();
}

/// Installs a leader's snapshot: the store takes the pending file's
/// contents (and flushes them), then the marker records it, so a restart
/// replays from there, and the file goes.
fn restore(state: &MemberState, index: u64, term: u64, path: &std::path::Path) {
    // Tests stop the member here (`kv::restore=return`): the WAL holds the
    // snapshot's record, the store does not yet hold its contents.
    fail::fail_point!("kv::restore", |_| {
        tracing::error!("failpoint kv::restore: stopping before installing a snapshot");
        std::process::exit(1)
    });
    let restored = std::fs::File::open(path)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|file| {
            state
                .store
                .restore_from(index, std::io::BufReader::new(file))
                .map_err(|e| e.to_string())
        });
    if let Err(error) = restored {
        tracing::error!(%error, "could not install a snapshot; stopping the member");
        std::process::exit(1);
    }
    if let Err(error) = state.record_snapshot(index, term) {
        tracing::error!(%error, "could not record a snapshot; stopping the member");
        std::process::exit(1);
    }
    crate::snapshot_transfer::remove_pending_through(&state.config.data_dir(), index);
    state.watch_hub.publish(Published::Restored);
    let applied = state.store.consistent_index();
    state.applied_index.store(applied, Ordering::Release);
    state.applied.notify_waiters();
    tracing::info!(index, term, applied, "installed a snapshot from the leader");
}

fn attributes_path(state: &MemberState) -> PathBuf {
    state.config.data_dir().join(ATTRIBUTES_FILE)
}

fn publish(state: &MemberState, attributes: MemberAttributes) {
    let mut urls = state.client_urls.lock();
    if urls.get(&attributes.id) == Some(&attributes.client_urls) {
        return;
    }
    urls.insert(attributes.id, attributes.client_urls);
    let json = serde_json::to_string(&*urls).expect("urls serialize");
    let path = attributes_path(state);
    if let Err(error) = std::fs::write(&path, json) {
        tracing::warn!(%error, path = %path.display(), "could not keep member attributes");
    }
}

/// Client URLs published before the last stop.
pub fn load_attributes(data_dir: &std::path::Path) -> ClientUrls {
    std::fs::read_to_string(data_dir.join(ATTRIBUTES_FILE))
        .ok()
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default()
}
