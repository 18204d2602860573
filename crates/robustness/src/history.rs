//! A recorded history: every call the workload's clients made, when it
//! was made and when (if ever) it returned, and what it returned.
//!
//! Times are nanoseconds since the round started, on one monotonic clock
//! shared by every client. A write that failed in a way that does not say
//! it did not happen (a timeout, a lost connection, "leader changed") is
//! `Unknown`: it may have taken effect at any point after its call, so it
//! never returns. A read that failed has no effect and is left out.

use serde::{Deserialize, Serialize};

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    Put {
        key: String,
        value: String,
        lease: i64,
    },
    /// A linearizable get.
    Get {
        key: String,
    },
    Delete {
        key: String,
    },
    /// A txn: if the key's mod revision is `expected` (0: the key does not
    /// exist), put `value`.
    Cas {
        key: String,
        expected: i64,
        value: String,
    },
    LeaseGrant {
        id: i64,
    },
    LeaseRevoke {
        id: i64,
    },
}

impl Call {
    /// The key this call reads or writes, if one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Call::Put { key, .. } | Call::Get { key } | Call::Delete { key } | Call::Cas { key, .. } => Some(key),
            Call::LeaseGrant { .. } | Call::LeaseRevoke { .. } => None,
        }
    }

    pub fn is_read(&self) -> bool {
        matches!(self, Call::Get { .. })
    }
}

/// What it returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Return {
    Put {
        revision: i64,
    },
    /// The value and mod revision, if the key existed.
    Get {
        revision: i64,
        kv: Option<(String, i64)>,
    },
    Delete {
        revision: i64,
        deleted: i64,
    },
    Cas {
        revision: i64,
        succeeded: bool,
    },
    LeaseGrant,
    LeaseRevoke {
        revision: i64,
    },
    /// A write whose outcome is unknown, with the error seen.
    Unknown(String),
}

/// One call and its return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub client: usize,
    pub call: Call,
    /// When the call was made.
    pub invoked: u64,
    /// When it returned; `u64::MAX` for an unknown outcome.
    pub returned: u64,
    pub result: Return,
}

impl Operation {
    pub fn is_unknown(&self) -> bool {
        matches!(self.result, Return::Unknown(_))
    }
}

/// A round's history.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    pub operations: Vec<Operation>,
}

impl History {
    /// The operations on each key, with each lease revoke added to every
    /// key ever put with that lease (a revoke deletes those keys). Reads
    /// and writes of one key are all a key's linearization depends on:
    /// etcd's operations are linearizable per key if and only if the whole
    /// history is (P-compositionality), leases being the one cross-key
    /// effect, handled here.
    pub fn by_key(&self) -> Vec<(String, Vec<Operation>)> {
        let mut keys: std::collections::BTreeMap<String, Vec<Operation>> = Default::default();
        for operation in &self.operations {
            if let Some(key) = operation.call.key() {
                keys.entry(key.to_string()).or_default().push(operation.clone());
            }
        }
        for operation in &self.operations {
            let Call::LeaseRevoke { id } = operation.call else {
                continue;
            };
            for operations in keys.values_mut() {
                let attached = operations
                    .iter()
                    .any(|op| matches!(op.call, Call::Put { lease, .. } if lease == id));
                if attached {
                    operations.push(operation.clone());
                }
            }
        }
        keys.into_iter().collect()
    }
}
