//! The workload's call mix, and what a client learns from what its calls
//! returned: the robustness suite's clients (`workload.rs`) and the
//! simulator's draw their calls here, so both check the same model with
//! the same mix. The caller draws the key and the roll with its own
//! generator.

use std::collections::BTreeMap;

use crate::history::{Call, Return};

/// A client's lease, through its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    None,
    Granted(i64),
    Attached(i64),
}

/// One client's side of the mix.
#[derive(Debug, Clone)]
pub struct CallMix {
    client: usize,
    writes: u64,
    /// The last mod revision this client saw per key (0: none).
    seen: BTreeMap<String, i64>,
    lease: Lease,
}

impl CallMix {
    pub fn new(client: usize) -> CallMix {
        CallMix {
            client,
            writes: 0,
            seen: BTreeMap::new(),
            lease: Lease::None,
        }
    }

    /// A value no other write of the round has.
    fn value(&mut self) -> String {
        self.writes += 1;
        format!("c{}-{}", self.client, self.writes)
    }

    /// The next call, on `key`, its kind chosen by `roll` (0..100): 30 %
    /// puts, 30 % gets, 10 % deletes, 20 % compare-and-swaps on the mod
    /// revision last seen, 10 % the lease's next step (a grant of id
    /// `lease_ids_from` plus the writes so far, a put with it, a revoke).
    pub fn pick(&mut self, key: String, roll: u64, lease_ids_from: i64) -> Call {
        match roll {
            0..30 => Call::Put {
                key,
                value: self.value(),
                lease: 0,
            },
            30..60 => Call::Get { key },
            60..70 => Call::Delete { key },
            70..90 => Call::Cas {
                expected: self.seen.get(&key).copied().unwrap_or(0),
                key,
                value: self.value(),
            },
            _ => match self.lease {
                Lease::None => Call::LeaseGrant {
                    id: lease_ids_from + self.writes as i64,
                },
                Lease::Granted(id) => Call::Put {
                    key,
                    value: self.value(),
                    lease: id,
                },
                Lease::Attached(id) => Call::LeaseRevoke { id },
            },
        }
    }

    /// What the client learns from a return, for its next calls.
    pub fn learn(&mut self, call: &Call, result: &Return) {
        match (call, result) {
            (Call::Get { key }, Return::Get { kv, .. }) => {
                self.seen
                    .insert(key.clone(), kv.as_ref().map_or(0, |(_, revision)| *revision));
            }
            (Call::Put { key, lease, .. }, Return::Put { revision }) => {
                self.seen.insert(key.clone(), *revision);
                if *lease != 0 {
                    self.lease = Lease::Attached(*lease);
                }
            }
            (
                Call::Cas { key, .. },
                Return::Cas {
                    revision,
                    succeeded: true,
                },
            ) => {
                self.seen.insert(key.clone(), *revision);
            }
            (Call::LeaseGrant { id }, Return::LeaseGrant) => self.lease = Lease::Granted(*id),
            (Call::LeaseRevoke { .. }, _) => self.lease = Lease::None,
            _ => {}
        }
    }

    /// A lease call failed: the client starts over with a new lease.
    pub fn lease_call_failed(&mut self, call: &Call) {
        if matches!(call, Call::LeaseRevoke { .. } | Call::LeaseGrant { .. }) {
            self.lease = Lease::None;
        }
    }
}
