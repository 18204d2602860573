//! Committed entries, decoded into what the store applies.
//!
//! A normal entry's data is a `RaftRequest` (`proto/kvserverpb`): the
//! proposing member, its sequence number (whoever waits for the answer),
//! and the request in etcd's wire form, converted here to the store's
//! types. A configuration change entry is raft's `ConfChange`, whose
//! context names the member and the waiter. A
//! txn whose ops hold nothing is refused as etcd refuses it, before the
//! store sees it.

use prost::Message as _;
use protobuf::Message as _;
use raft::prelude::{ConfChange, ConfChangeType, Entry, EntryType};

use crate::auth::Caller;
use crate::membership::{Change, Member, Membership};
use crate::proto::convert;
use crate::proto::kvserverpb::{auth_request, raft_request::Request, ConfChangeContext, MemberAttributes, RaftRequest};

/// What one entry asks for.
pub enum Decoded {
    /// A write for the store, or its refusal.
    Write(Result<mvcc::WriteRequest, mvcc::Error>),
    /// A member published its client URLs and name.
    Attributes(MemberAttributes),
    /// A change to the membership.
    Membership(Change),
    /// A change to the auth state, or a login.
    Auth(auth_request::Request),
    /// Nothing to apply: an empty entry (a new leader's first), or an
    /// empty request.
    Nothing,
}

/// One entry, decoded.
pub struct Proposal {
    /// Who waits on this member for its answer: its sequence, when this
    /// member proposed it.
    pub owner: Option<u64>,
    /// Who made it, and the auth revision its permissions were checked at.
    pub caller: Caller,
    /// Whether it is a client's write of keys (put, delete, txn), which
    /// needs permissions once auth is on; members' own proposals (expired
    /// leases, alarms, attributes) do not.
    pub client_write: bool,
    pub decoded: Decoded,
}

impl Proposal {
    fn internal(owner: Option<u64>, decoded: Decoded) -> Proposal {
        Proposal {
            owner,
            caller: Caller::default(),
            client_write: false,
            decoded,
        }
    }
}

/// Decodes `entry` against the membership as it stands before it.
///
/// A committed entry that does not decode stops the member with a panic:
/// every member applies the same entry, and one that skipped or guessed
/// at it would diverge from the others silently.
pub fn decode(entry: &Entry, member_id: u64, membership: &Membership) -> Proposal {
    if entry.data.is_empty() {
        return Proposal::internal(None, Decoded::Nothing);
    }
    match entry.get_entry_type() {
        EntryType::EntryNormal => {}
        EntryType::EntryConfChange => {
            let (owner, decoded) = conf_change(entry, member_id, membership);
            return Proposal::internal(owner, decoded);
        }
        EntryType::EntryConfChangeV2 => {
            tracing::warn!(index = entry.index, "ignoring a joint membership change entry");
            return Proposal::internal(None, Decoded::Nothing);
        }
    }
    // From the entry's shared buffer, not a slice of it: prost takes each
    // bytes field as a view of the buffer before copying it into its
    // `Vec`, and over a slice that view is itself a copy.
    let request = RaftRequest::decode(entry.data.clone()).unwrap_or_else(|error| undecodable(entry, &error));
    let owner = (request.member == member_id).then_some(request.sequence);
    let caller = Caller {
        user: request.user,
        revision: request.auth_revision,
    };
    let client_write = matches!(
        request.request,
        Some(Request::Put(_) | Request::DeleteRange(_) | Request::Txn(_))
    );
    Proposal {
        owner,
        caller,
        client_write,
        decoded: decode_request(request.request),
    }
}

fn decode_request(request: Option<Request>) -> Decoded {
    match request {
        Some(Request::Put(put)) => Decoded::Write(Ok(mvcc::WriteRequest::Put(convert::put_request(put)))),
        Some(Request::DeleteRange(delete)) => Decoded::Write(Ok(mvcc::WriteRequest::DeleteRange(
            convert::delete_range_request(delete),
        ))),
        Some(Request::Txn(txn)) => Decoded::Write(convert::txn_request(txn).map(mvcc::WriteRequest::Txn)),
        Some(Request::Compaction(compaction)) => {
            Decoded::Write(Ok(mvcc::WriteRequest::Compaction(mvcc::CompactionRequest {
                revision: compaction.revision,
            })))
        }
        Some(Request::LeaseGrant(grant)) => {
            Decoded::Write(Ok(mvcc::WriteRequest::LeaseGrant(mvcc::LeaseGrantRequest {
                id: grant.id,
                ttl: grant.ttl,
            })))
        }
        Some(Request::LeaseRevoke(revoke)) => {
            Decoded::Write(Ok(mvcc::WriteRequest::LeaseRevoke(mvcc::LeaseRevokeRequest {
                id: revoke.id,
            })))
        }
        Some(Request::LeaseCheckpoint(request)) => {
            Decoded::Write(Ok(mvcc::WriteRequest::LeaseCheckpoint(mvcc::LeaseCheckpointRequest {
                checkpoints: request
                    .checkpoints
                    .iter()
                    .map(|checkpoint| mvcc::LeaseCheckpoint {
                        id: checkpoint.id,
                        remaining_ttl: checkpoint.remaining_ttl,
                    })
                    .collect(),
            })))
        }
        Some(Request::Alarm(alarm)) => match alarm_request(&alarm) {
            Some(request) => Decoded::Write(Ok(mvcc::WriteRequest::Alarm(request))),
            None => Decoded::Nothing,
        },
        Some(Request::Attributes(attributes)) => Decoded::Attributes(attributes),
        Some(Request::MemberUpdate(update)) => Decoded::Membership(Change::PeerUrls {
            id: update.id,
            peer_urls: update.peer_urls,
        }),
        Some(Request::Auth(auth)) => match auth.request {
            Some(request) => Decoded::Auth(request),
            None => Decoded::Nothing,
        },
        None => Decoded::Nothing,
    }
}

/// A configuration change entry: raft's change, with a
/// `ConfChangeContext` in its context. Adding a voter that is a learner
/// is etcd's promotion.
///
/// Undecodable bytes here are what they are for a request (see
/// [`decode`]): a committed entry every member applies, which this
/// member cannot read, so it stops rather than apply something else. The
/// same holds for an addition whose context carries no member record:
/// every proposer of an addition writes one, so its absence means damage,
/// and applying it would add a member with no URLs.
fn conf_change(entry: &Entry, member_id: u64, membership: &Membership) -> (Option<u64>, Decoded) {
    let change = ConfChange::parse_from_bytes(&entry.data).unwrap_or_else(|error| undecodable(entry, &error));
    let context = ConfChangeContext::decode(&change.context[..]).unwrap_or_else(|error| undecodable(entry, &error));
    let owner = (context.proposer == member_id).then_some(context.sequence);
    let id = change.node_id;
    let member = |is_learner| Member {
        id,
        is_learner,
        ..Member::from_record(
            context
                .member
                .clone()
                .unwrap_or_else(|| undecodable(entry, &"a member addition without the member's record")),
        )
    };
    let decoded = match change.get_change_type() {
        ConfChangeType::AddNode if membership.get(id).is_some_and(|m| m.is_learner) => Change::Promote(id),
        ConfChangeType::AddNode => Change::AddVoter(member(false)),
        ConfChangeType::AddLearnerNode => Change::AddLearner(member(true)),
        ConfChangeType::RemoveNode => Change::Remove(id),
    };
    (owner, Decoded::Membership(decoded))
}

/// Stops the member on a committed entry it cannot read, whatever part
/// of it failed: one fault, `committed entry N does not decode`, which the
/// apply stage's guard (`crate::halt`) turns into the member's stop.
fn undecodable(entry: &Entry, error: &dyn std::fmt::Display) -> ! {
    panic!("committed entry {} does not decode: {error}", entry.index)
}

/// A raise or a clear as the store takes it; `None` for a GET, which is
/// never proposed.
fn alarm_request(alarm: &crate::proto::etcdserverpb::AlarmRequest) -> Option<mvcc::AlarmRequest> {
    use crate::proto::etcdserverpb::alarm_request::AlarmAction;
    let activate = match AlarmAction::try_from(alarm.action).ok()? {
        AlarmAction::Activate => true,
        AlarmAction::Deactivate => false,
        AlarmAction::Get => return None,
    };
    Some(mvcc::AlarmRequest {
        activate,
        alarm: mvcc::Alarm {
            member_id: alarm.member_id,
            kind: alarm.alarm,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message `decode` panics with on `entry`.
    fn fault_of(entry: &Entry) -> String {
        let membership = Membership::from_record(Default::default(), 1);
        let Err(panicked) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(entry, 1, &membership)))
        else {
            panic!("entry {} decoded", entry.index);
        };
        match panicked.downcast::<String>() {
            Ok(message) => *message,
            Err(_) => panic!("the panic carries a message"),
        }
    }

    fn entry(index: u64, kind: EntryType, data: Vec<u8>) -> Entry {
        let mut entry = Entry {
            index,
            data: data.into(),
            ..Default::default()
        };
        entry.set_entry_type(kind);
        entry
    }

    // Goal: a committed entry whose bytes do not decode stops the member
    // with one fault, whether the request, the conf change or its context
    // is damaged, or an addition lacks the member's record.
    #[test]
    fn every_undecodable_entry_is_the_same_fault() {
        let garbage = vec![0xff; 7];
        let request = fault_of(&entry(7, EntryType::EntryNormal, garbage.clone()));
        let mut change = ConfChange::default();
        change.set_change_type(ConfChangeType::AddNode);
        change.node_id = 2;
        change.context = garbage.into();
        let context = fault_of(&entry(8, EntryType::EntryConfChange, change.write_to_bytes().unwrap()));
        change.context = ConfChangeContext::default().encode_to_vec().into();
        let no_record = fault_of(&entry(9, EntryType::EntryConfChange, change.write_to_bytes().unwrap()));
        for (fault, index) in [(&request, 7), (&context, 8), (&no_record, 9)] {
            let expected = format!("committed entry {index} does not decode: ");
            assert!(fault.starts_with(&expected), "{fault}");
        }
    }
}
