//! The records the server owns, kept beside the revisions: alarms, the
//! auth and membership records (opaque to the store), and each lease's
//! record (its TTL, and a persisted checkpoint).

use super::*;

/// Reads the raised alarms from storage.
/// Keeps the server's opaque membership or auth record (see
/// [`WriteRequest::Membership`], [`WriteRequest::Auth`]).
pub(super) fn keep_record(state: &mut State, batch: &mut Batch, request: &WriteRequest, record: &[u8]) -> Applied {
    let (key, kept, response) = match request {
        WriteRequest::Membership(_) => (META_MEMBERSHIP, &mut state.membership, WriteResponse::Membership),
        _ => (META_AUTH, &mut state.auth, WriteResponse::Auth),
    };
    batch.writes.insert(key, record);
    *kept = Some(record.to_vec());
    Applied {
        response: Ok(response),
        events: Vec::new(),
    }
}

pub(super) fn read_alarms(db: &sled::Db) -> Result<BTreeSet<Alarm>> {
    let Some(bytes) = db.get(META_ALARMS)? else {
        return Ok(BTreeSet::new());
    };
    if bytes.len() % 12 != 0 {
        return Err(corrupt("alarm records are not 12 bytes each"));
    }
    Ok(bytes
        .chunks_exact(12)
        .map(|record| Alarm {
            member_id: u64::from_be_bytes(record[..8].try_into().expect("8 bytes")),
            kind: i32::from_be_bytes(record[8..].try_into().expect("4 bytes")),
        })
        .collect())
}

pub(super) fn encode_alarms(alarms: &BTreeSet<Alarm>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(alarms.len() * 12);
    for alarm in alarms {
        bytes.extend_from_slice(&alarm.member_id.to_be_bytes());
        bytes.extend_from_slice(&alarm.kind.to_be_bytes());
    }
    bytes
}

/// The bits of `alarm_kinds` for `alarms` (kinds outside 0..32 have none).
pub(super) fn kinds_of(alarms: &BTreeSet<Alarm>) -> u32 {
    alarms
        .iter()
        .filter(|alarm| (0..32).contains(&alarm.kind))
        .fold(0, |kinds, alarm| kinds | 1 << alarm.kind)
}

pub(crate) fn lease_key(id: i64) -> [u8; 9] {
    let mut key = [LEASE_SPACE; 9];
    key[1..].copy_from_slice(&id.to_be_bytes());
    key
}

/// A lease's stored value: its TTL, then its checkpointed remaining TTL
/// when one is set (see `lease.rs`).
pub(super) fn lease_record(ttl: i64, remaining_ttl: i64) -> Vec<u8> {
    let mut record = ttl.to_be_bytes().to_vec();
    if remaining_ttl != 0 {
        record.extend_from_slice(&remaining_ttl.to_be_bytes());
    }
    record
}

/// The TTL and remaining TTL of a stored lease value, if it is one.
pub(super) fn decode_lease_record(value: &[u8]) -> Option<(i64, i64)> {
    let word = |at: usize| {
        value
            .get(at..at + 8)
            .map(|bytes| i64::from_be_bytes(bytes.try_into().unwrap()))
    };
    match value.len() {
        8 => Some((word(0)?, 0)),
        16 => Some((word(0)?, word(8)?)),
        _ => None,
    }
}

/// Grants a lease: a new lease record, no revision.
pub(super) fn grant_lease(
    state: &mut State,
    batch: &mut Batch,
    request: &LeaseGrantRequest,
) -> Result<LeaseGrantResponse> {
    if state.leases.contains(request.id) {
        return Err(Error::LeaseExists);
    }
    state.leases.grant(request.id, request.ttl);
    batch.writes.insert(&lease_key(request.id), &request.ttl.to_be_bytes());
    Ok(LeaseGrantResponse {
        revision: state.current_revision,
        id: request.id,
        ttl: request.ttl,
    })
}

/// Applies lease checkpoints: each lease that still exists takes its
/// remaining TTL, stored too when `persist`. No revision.
pub(super) fn checkpoint_leases(
    state: &mut State,
    batch: &mut Batch,
    request: &LeaseCheckpointRequest,
    persist: bool,
) -> WriteResponse {
    for checkpoint in &request.checkpoints {
        if state.leases.checkpoint(checkpoint.id, checkpoint.remaining_ttl) && persist {
            let ttl = state.leases.get(checkpoint.id).map_or(0, |lease| lease.ttl);
            batch
                .writes
                .insert(&lease_key(checkpoint.id), lease_record(ttl, checkpoint.remaining_ttl));
        }
    }
    WriteResponse::LeaseCheckpoint {
        revision: state.current_revision,
    }
}

/// etcd's NOSPACE alarm kind (`AlarmType_NOSPACE`).
pub const ALARM_NOSPACE: i32 = 1;

/// Whether `request` adds data, as the server's quota counts it when the
/// request arrives: a put, a lease grant, or a txn with a put in either
/// branch (nested txns included).
pub(super) fn adds_data(request: &WriteRequest) -> bool {
    match request {
        WriteRequest::Put(_) | WriteRequest::LeaseGrant(_) => true,
        WriteRequest::Txn(txn) => txn.put_bytes() > 0,
        _ => false,
    }
}

/// etcd's `AlarmType_NONE`: raising it changes nothing.
pub(super) const ALARM_NONE: i32 = 0;

/// Raises or clears an alarm, as etcd's alarm store does.
pub(super) fn change_alarm(state: &mut State, batch: &mut Batch, request: &AlarmRequest) -> AlarmResponse {
    if request.activate && request.alarm.kind == ALARM_NONE {
        return AlarmResponse { alarm: None };
    }
    let raised_before = state.alarms.iter().any(|alarm| alarm.kind == request.alarm.kind);
    let changed = if request.activate {
        state.alarms.insert(request.alarm);
        Some(request.alarm)
    } else {
        state.alarms.remove(&request.alarm).then_some(request.alarm)
    };
    // etcd's lines, on the kind's first raise and its last clear.
    let raised_after = state.alarms.iter().any(|alarm| alarm.kind == request.alarm.kind);
    let kind = match request.alarm.kind {
        1 => "NOSPACE",
        2 => "CORRUPT",
        _ => "NONE",
    };
    let from = format!("{:x}", request.alarm.member_id);
    match (raised_before, raised_after) {
        (false, true) => tracing::warn!(alarm = kind, from, "alarm raised"),
        (true, false) => tracing::warn!(alarm = kind, from, "alarm disarmed"),
        _ => {}
    }
    batch.writes.insert(META_ALARMS, encode_alarms(&state.alarms));
    AlarmResponse { alarm: changed }
}

impl Store {
    /// The auth record last applied (see [`WriteRequest::Auth`]), if
    /// auth was ever changed.
    pub fn auth(&self) -> Option<Vec<u8>> {
        self.state.read().auth.clone()
    }

    /// The membership record last applied (see
    /// [`WriteRequest::Membership`]) and the consistent index it stands
    /// at, read together.
    pub fn membership(&self) -> (u64, Option<Vec<u8>>) {
        self.published.lock().clone()
    }

    /// Copies the state's index and membership out of its lock (see
    /// `published`); the membership only when `membership_changed`.
    pub(super) fn publish(&self, state: &State, membership_changed: bool) {
        let mut published = self.published.lock();
        published.0 = state.consistent_index;
        if membership_changed {
            published.1.clone_from(&state.membership);
        }
        self.published_index.store(state.consistent_index, Ordering::Release);
        self.published_revision.store(state.current_revision, Ordering::Release);
        self.published_compact.store(state.compact_revision, Ordering::Release);
    }

    /// The raised alarms, by member then kind.
    pub fn alarms(&self) -> Vec<Alarm> {
        self.state.read().alarms.iter().copied().collect()
    }

    /// Whether some member's alarm of this kind is raised; reads no lock.
    pub fn has_alarm(&self, kind: i32) -> bool {
        (0..32).contains(&kind) && self.alarm_kinds.load(Ordering::Acquire) & 1 << kind != 0
    }
}
