//! The simulated clients: each a tokio task on the simulator's runtime,
//! calling a member drawn per call through the core's own methods
//! (`kv_server::sim::Clients`), and recording every call in the history
//! the robustness suite's checkers read. The calls and their mix are the
//! robustness suite's (put, get, delete, compare-and-swap, a lease granted,
//! attached to a put and revoked), so both check the same model.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kv_server::sim::{CallError, Clients, Rng};
use parking_lot::Mutex;
use robustness::history::{Call, Operation, Return};

/// Keys the clients share: few, so that calls contend on each.
pub const KEYS: usize = 4;

/// Lease TTL in seconds: longer than any run, so a lease ends only by a
/// revocation the history records.
const LEASE_TTL: i64 = 600;

/// The longest pause between a client's calls.
const PAUSE_MAX: Duration = Duration::from_millis(20);

/// Calls one client makes at most: bounds a run whatever its clock does.
const CALLS_PER_CLIENT_MAX: usize = 2_000;

/// Where the clients record their operations.
pub type Recorded = Arc<Mutex<Vec<Operation>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lease {
    None,
    Granted(i64),
    Attached(i64),
}

struct Client {
    id: usize,
    rng: Rng,
    writes: u64,
    /// Each key's mod revision as this client last saw it.
    seen: BTreeMap<String, i64>,
    lease: Lease,
}

impl Client {
    fn value(&mut self) -> String {
        self.writes += 1;
        format!("c{}-{}", self.id, self.writes)
    }

    fn pick(&mut self) -> Call {
        let key = format!("key{}", self.rng.below(KEYS as u64));
        match self.rng.below(100) {
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
                    id: 1_000_000 + (self.id as i64) * 10_000 + self.writes as i64,
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

    fn learn(&mut self, call: &Call, result: &Return) {
        match (call, result) {
            (Call::Get { key }, Return::Get { kv, .. }) => {
                self.seen.insert(key.clone(), kv.as_ref().map_or(0, |(_, r)| *r));
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
}

/// Makes `call` through member `member`.
async fn make(clients: &Clients, member: usize, call: &Call) -> Result<Return, CallError> {
    Ok(match call {
        Call::Put { key, value, lease } => Return::Put {
            revision: clients.put(member, key, value, *lease).await?,
        },
        Call::Get { key } => {
            let (revision, kv) = clients.get(member, key).await?;
            Return::Get { revision, kv }
        }
        Call::Delete { key } => {
            let (revision, deleted) = clients.delete(member, key).await?;
            Return::Delete { revision, deleted }
        }
        Call::Cas { key, expected, value } => {
            let (revision, succeeded) = clients.cas(member, key, *expected, value).await?;
            Return::Cas { revision, succeeded }
        }
        Call::LeaseGrant { id } => {
            clients.lease_grant(member, *id, LEASE_TTL).await?;
            Return::LeaseGrant
        }
        Call::LeaseRevoke { id } => Return::LeaseRevoke {
            revision: clients.lease_revoke(member, *id).await?,
        },
    })
}

/// Runs client `id` until `until_nanos` of simulated time, calling members
/// `0..members`; records into `recorded`.
pub async fn run_client(id: usize, clients: Clients, members: usize, rng: Rng, until_nanos: u64, recorded: Recorded) {
    let mut client = Client {
        id,
        rng,
        writes: 0,
        seen: BTreeMap::new(),
        lease: Lease::None,
    };
    for _ in 0..CALLS_PER_CLIENT_MAX {
        let pause = client.rng.below(PAUSE_MAX.as_micros() as u64);
        tokio::time::sleep(Duration::from_micros(pause)).await;
        if clients.now_nanos() >= until_nanos {
            return;
        }
        let member = client.rng.below(members as u64) as usize;
        let call = client.pick();
        let invoked = clients.now_nanos();
        let result = make(&clients, member, &call).await;
        let returned = clients.now_nanos();
        let operation = match result {
            Ok(result) => {
                client.learn(&call, &result);
                Operation {
                    client: id,
                    call,
                    invoked,
                    returned,
                    result,
                }
            }
            // Never made, or a read that failed: no effect to record.
            Err(CallError::Down) => continue,
            Err(CallError::Failed(_)) if call.is_read() => continue,
            Err(CallError::Failed(error)) => Operation {
                client: id,
                call,
                invoked,
                returned: u64::MAX,
                result: Return::Unknown(error),
            },
        };
        recorded.lock().push(operation);
    }
}
