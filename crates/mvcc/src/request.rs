//! Requests and responses of the store, shaped like etcd's `etcdserverpb`
//! messages but free of any wire format: the server converts.
//!
//! `range_end` follows etcd: empty means the single key `key`; `[0]` means
//! every key `>= key`; anything else is the exclusive end of `[key, end)`.

use crate::key_value::{Event, KeyValue};
use crate::wire::AnswerBytesMax;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortOrder {
    #[default]
    None,
    Ascend,
    Descend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortTarget {
    #[default]
    Key,
    Version,
    Create,
    Mod,
    Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeRequest {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    /// At most this many keys; 0 for no limit.
    pub limit: i64,
    /// Read at this revision; 0 or less for the current one.
    pub revision: i64,
    pub sort_order: SortOrder,
    pub sort_target: SortTarget,
    pub keys_only: bool,
    pub count_only: bool,
    /// Filters; 0 disables each.
    pub min_mod_revision: i64,
    pub max_mod_revision: i64,
    pub min_create_revision: i64,
    pub max_create_revision: i64,
    /// The answer's `count` is not wanted (etcd 3.7's chunks of a
    /// RangeStream): it comes back 0, and the index walk of a range with
    /// no sort order and no filter stops at the limit instead of counting
    /// to the end of the range.
    pub uncounted: bool,
    /// The answer's bound in encoded bytes, the server's header included
    /// (wire.rs): a larger answer is refused with
    /// [`Error::AnswerTooLarge`](crate::Error::AnswerTooLarge).
    pub answer_bytes_max: AnswerBytesMax,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RangeResponse {
    /// The revision the range was read at (the header revision).
    pub revision: i64,
    pub kvs: Vec<KeyValue>,
    /// Whether keys past the limit exist.
    pub more: bool,
    /// Keys in the range at that revision, before filters and the limit.
    pub count: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PutRequest {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub lease: i64,
    pub prev_kv: bool,
    pub ignore_value: bool,
    pub ignore_lease: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PutResponse {
    pub revision: i64,
    pub prev_kv: Option<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteRangeRequest {
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
    pub prev_kv: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteRangeResponse {
    pub revision: i64,
    pub deleted: i64,
    pub prev_kvs: Vec<KeyValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareResult {
    Equal,
    Greater,
    Less,
    NotEqual,
}

/// What a compare looks at, with the operand to compare it against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompareTarget {
    Version(i64),
    Create(i64),
    Mod(i64),
    Value(Vec<u8>),
    Lease(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    pub result: CompareResult,
    pub target: CompareTarget,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestOp {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseOp {
    Range(RangeResponse),
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<RequestOp>,
    pub failure: Vec<RequestOp>,
}

impl TxnRequest {
    /// Whether every operation of both branches is a range (a nested txn
    /// counts as a write): etcd's `isTxnReadonly`. Such a txn is served
    /// without raft, by [`crate::Store::read_txn`].
    pub fn is_read_only(&self) -> bool {
        self.success
            .iter()
            .chain(&self.failure)
            .all(|op| matches!(op, RequestOp::Range(_)))
    }

    /// The key and value bytes of every put in either branch, nested txns
    /// included: what the txn adds, as the space quota counts it (a txn
    /// adds data when this is above 0, since every put has a key).
    pub fn put_bytes(&self) -> usize {
        self.success
            .iter()
            .chain(&self.failure)
            .map(|op| match op {
                RequestOp::Put(put) => put.key.len() + put.value.len(),
                RequestOp::Txn(nested) => nested.put_bytes(),
                RequestOp::Range(_) | RequestOp::DeleteRange(_) => 0,
            })
            .sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnResponse {
    pub revision: i64,
    pub succeeded: bool,
    pub responses: Vec<ResponseOp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionRequest {
    pub revision: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionResponse {
    /// The store's current revision (the header revision).
    pub revision: i64,
}

/// Grants lease `id` (never 0: the server picks one when the client
/// does not) for `ttl` seconds. Creates no revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseGrantRequest {
    pub id: i64,
    pub ttl: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseGrantResponse {
    /// The store's current revision (the header revision).
    pub revision: i64,
    pub id: i64,
    pub ttl: i64,
}

/// Revokes a lease: its keys are deleted, in key order, under one new
/// revision (none if it held no keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseRevokeRequest {
    pub id: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseRevokeResponse {
    /// The revision after the revocation (the header revision).
    pub revision: i64,
}

/// Checkpoints of leases' remaining TTLs (etcd's `LeaseCheckpointRequest`),
/// proposed by the leader: each lease that still exists takes its
/// remaining TTL (0 clears it). Creates no revision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseCheckpointRequest {
    pub checkpoints: Vec<LeaseCheckpoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseCheckpoint {
    pub id: i64,
    /// Seconds left, rounded up; 0 clears the checkpoint.
    pub remaining_ttl: i64,
}

/// One member's alarm of one kind (etcd's `AlarmMember`; the kinds are
/// etcd's `AlarmType` numbers: 1 NOSPACE, 2 CORRUPT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Alarm {
    pub member_id: u64,
    pub kind: i32,
}

/// etcd's `AlarmRequest` with ACTIVATE (`activate`) or DEACTIVATE: raises
/// or clears one member's alarm. Alarms are replicated state: they do not
/// move the revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlarmRequest {
    pub activate: bool,
    pub alarm: Alarm,
}

/// What etcd answers: the alarm raised (also when it already was), or the
/// alarm cleared (none when it was not raised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlarmResponse {
    pub alarm: Option<Alarm>,
}

/// A request that goes through raft and is applied to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRequest {
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    Compaction(CompactionRequest),
    LeaseGrant(LeaseGrantRequest),
    LeaseRevoke(LeaseRevokeRequest),
    LeaseCheckpoint(LeaseCheckpointRequest),
    Alarm(AlarmRequest),
    /// The cluster's membership after a change, encoded by the server: the
    /// store keeps it, opaque, so that it travels in every snapshot and
    /// stays in step with the applied index. It does not move the revision.
    Membership(Vec<u8>),
    /// The auth state (users, roles, whether auth is on, its revision)
    /// after a change, encoded by the server and kept opaque, as the
    /// membership is. It does not move the revision.
    Auth(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteResponse {
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    Compaction(CompactionResponse),
    LeaseGrant(LeaseGrantResponse),
    Alarm(AlarmResponse),
    LeaseRevoke(LeaseRevokeResponse),
    /// The store's current revision (the header revision).
    LeaseCheckpoint {
        revision: i64,
    },
    Membership,
    Auth,
}

/// One applied request: its answer, and the changes it made in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub response: Result<WriteResponse, crate::error::Error>,
    pub events: Vec<Event>,
}
