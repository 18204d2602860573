//! etcd's semantics for one key, as a sequential model: given the key's
//! state and one operation with what it returned, the states the key can
//! be in after it (none if the return is impossible there).
//!
//! A key's state is its value (if it exists), its mod revision and its
//! lease. Revisions are global in etcd, so a key only learns bounds on
//! them: every write to a key takes a revision above its previous one. A
//! write whose outcome is unknown leaves the mod revision known only to be
//! above the last one; a later read that returns the key's value tells it.
//!
//! Compared with etcd: a put or delete that succeeded changes the key at
//! the revision it returned; a get returns the value and mod revision; a
//! CAS txn (compare mod revision, then put) succeeds exactly when the mod
//! revision is the one expected (0 for a key that does not exist); a lease
//! revoke deletes the key if its value holds that lease.

use crate::history::{Call, Operation, Return};

/// What is known of a key's mod revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModRevision {
    Known(i64),
    /// Above this, not known exactly (after a write with unknown outcome).
    Above(i64),
}

impl ModRevision {
    /// Every later write's revision is above this.
    fn floor(self) -> i64 {
        match self {
            ModRevision::Known(revision) | ModRevision::Above(revision) => revision,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyState {
    pub value: Option<String>,
    pub mod_revision: ModRevision,
    pub lease: i64,
}

impl Default for KeyState {
    /// A key that never existed.
    fn default() -> KeyState {
        KeyState {
            value: None,
            mod_revision: ModRevision::Known(0),
            lease: 0,
        }
    }
}

impl KeyState {
    fn written(&self, value: &str, revision: ModRevision, lease: i64) -> KeyState {
        KeyState {
            value: Some(value.to_string()),
            mod_revision: revision,
            lease,
        }
    }

    fn deleted(&self, revision: ModRevision) -> KeyState {
        KeyState {
            value: None,
            mod_revision: revision,
            lease: 0,
        }
    }

    fn after_unknown(&self) -> ModRevision {
        ModRevision::Above(self.mod_revision.floor())
    }

    /// Whether a compare of the mod revision with `expected` holds: `None`
    /// when the mod revision is not known well enough to say.
    fn compare(&self, expected: i64) -> Option<bool> {
        match (&self.value, self.mod_revision) {
            (None, _) => Some(expected == 0),
            (Some(_), ModRevision::Known(revision)) => Some(revision == expected),
            (Some(_), ModRevision::Above(floor)) if expected <= floor => Some(false),
            (Some(_), ModRevision::Above(_)) => None,
        }
    }

    /// Whether `revision` can be the revision of the key's next write.
    fn follows(&self, revision: i64) -> bool {
        revision > self.mod_revision.floor()
    }
}

/// The states `state` can be in after `operation`; empty when what the
/// operation returned is impossible from `state`.
pub fn step(state: &KeyState, operation: &Operation) -> Vec<KeyState> {
    match (&operation.call, &operation.result) {
        (Call::Put { value, lease, .. }, Return::Put { revision }) if state.follows(*revision) => {
            vec![state.written(value, ModRevision::Known(*revision), *lease)]
        }
        (Call::Put { value, lease, .. }, Return::Unknown(_)) => {
            vec![state.written(value, state.after_unknown(), *lease)]
        }
        (Call::Get { .. }, Return::Get { kv, .. }) => get(state, kv.as_ref()),
        (Call::Delete { .. }, Return::Delete { revision, deleted }) => match (&state.value, deleted) {
            (Some(_), 1) if state.follows(*revision) => vec![state.deleted(ModRevision::Known(*revision))],
            (None, 0) => vec![state.clone()],
            _ => Vec::new(),
        },
        (Call::Delete { .. }, Return::Unknown(_)) if state.value.is_some() => {
            vec![state.deleted(state.after_unknown())]
        }
        (Call::Delete { .. }, Return::Unknown(_)) => vec![state.clone()],
        (Call::Cas { expected, value, .. }, Return::Cas { revision, succeeded }) => {
            let holds = state.compare(*expected);
            match succeeded {
                true if holds != Some(false) && state.follows(*revision) => {
                    vec![state.written(value, ModRevision::Known(*revision), 0)]
                }
                false if holds != Some(true) => vec![state.clone()],
                _ => Vec::new(),
            }
        }
        (Call::Cas { expected, value, .. }, Return::Unknown(_)) => {
            let applied = state.written(value, state.after_unknown(), 0);
            match state.compare(*expected) {
                Some(true) => vec![applied],
                Some(false) => vec![state.clone()],
                None => vec![state.clone(), applied],
            }
        }
        (Call::LeaseRevoke { id }, result) => revoke(state, *id, result),
        _ => Vec::new(),
    }
}

fn get(state: &KeyState, kv: Option<&(String, i64)>) -> Vec<KeyState> {
    match (kv, &state.value, state.mod_revision) {
        (None, None, _) => vec![state.clone()],
        (Some((value, revision)), Some(current), ModRevision::Known(known))
            if value == current && *revision == known =>
        {
            vec![state.clone()]
        }
        (Some((value, revision)), Some(current), ModRevision::Above(floor))
            if value == current && *revision > floor =>
        {
            let mut learned = state.clone();
            learned.mod_revision = ModRevision::Known(*revision);
            vec![learned]
        }
        _ => Vec::new(),
    }
}

fn revoke(state: &KeyState, id: i64, result: &Return) -> Vec<KeyState> {
    let attached = state.value.is_some() && state.lease == id;
    match result {
        Return::LeaseRevoke { revision } if attached && state.follows(*revision) => {
            vec![state.deleted(ModRevision::Known(*revision))]
        }
        Return::LeaseRevoke { .. } if !attached => vec![state.clone()],
        Return::Unknown(_) if attached => vec![state.deleted(state.after_unknown())],
        Return::Unknown(_) => vec![state.clone()],
        _ => Vec::new(),
    }
}
