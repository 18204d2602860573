//! The simulated clients: each a tokio task on the simulator's runtime,
//! calling a member drawn per call through the core's own methods
//! (`crate::harness::Clients`), and recording every call in the history
//! the robustness suite's checkers read. The calls and their mix are the
//! robustness suite's (`robustness::call_mix`: put, get, delete,
//! compare-and-swap, a lease granted, attached to a put and revoked), so
//! both check the same model. One more client reads every key from each
//! new leader the moment it sees one ([`run_leader_reader`]).

use std::sync::Arc;
use std::time::Duration;

use crate::harness::{CallError, Clients, Rng};
use parking_lot::Mutex;
use robustness::call_mix::CallMix;
use robustness::history::{Call, Operation, Return};

/// Keys the clients share: few, so that calls contend on each.
pub const KEYS: usize = 4;

/// Where client `c`'s lease ids start: `LEASE_IDS_FROM + c *
/// LEASE_IDS_PER_CLIENT`, above any call count a client reaches.
const LEASE_IDS_FROM: i64 = 1_000_000;
const LEASE_IDS_PER_CLIENT: i64 = 10_000;

/// Lease TTL in seconds: longer than any run, so a lease ends only by a
/// revocation the history records.
const LEASE_TTL: i64 = 600;

/// The longest pause between a client's calls.
const PAUSE_MAX: Duration = Duration::from_millis(20);

/// Calls one client makes at most: bounds a run whatever its clock does.
const CALLS_PER_CLIENT_MAX: usize = 2_000;

/// Where the clients record their operations.
pub type Recorded = Arc<Mutex<Vec<Operation>>>;

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
pub async fn run_client(
    id: usize,
    clients: Clients,
    members: usize,
    mut rng: Rng,
    until_nanos: u64,
    recorded: Recorded,
) {
    let mut mix = CallMix::new(id);
    let lease_ids_from = LEASE_IDS_FROM + id as i64 * LEASE_IDS_PER_CLIENT;
    for _ in 0..CALLS_PER_CLIENT_MAX {
        let pause = rng.below(PAUSE_MAX.as_micros() as u64);
        tokio::time::sleep(Duration::from_micros(pause)).await;
        if clients.now_nanos() >= until_nanos {
            return;
        }
        let member = rng.below(members as u64) as usize;
        let key = format!("key{}", rng.below(KEYS as u64));
        let call = mix.pick(key, rng.below(100), lease_ids_from);
        let invoked = clients.now_nanos();
        let result = make(&clients, member, &call).await;
        let returned = clients.now_nanos();
        let operation = match result {
            Ok(result) => {
                mix.learn(&call, &result);
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

/// How often the leader reader looks for a new leader: the simulator's
/// quantum, the finest its clock steps.
const LEADER_LOOK_EVERY: Duration = Duration::from_millis(1);

/// Looks the leader reader makes at most: bounds a run whatever its clock
/// does (a run's load lasts 1.5 s of simulated time).
const LEADER_LOOKS_MAX: usize = 5_000;

/// Runs the leader reader, client `id`, until `until_nanos`: each time a
/// member of `0..members` is newly the leader, it reads every key from
/// it at once. Those reads are the ones most exposed to a new leader that
/// answers a read before it has committed an entry of its term, when it
/// may not yet know what its predecessor committed (raft's read-index
/// rule; the `skip-term-check` broken build).
pub async fn run_leader_reader(id: usize, clients: Clients, members: usize, until_nanos: u64, recorded: Recorded) {
    let mut last = None;
    for _ in 0..LEADER_LOOKS_MAX {
        tokio::time::sleep(LEADER_LOOK_EVERY).await;
        if clients.now_nanos() >= until_nanos {
            return;
        }
        let leader = (0..members).find(|&m| clients.leads(m));
        if leader.is_none() || leader == last {
            continue;
        }
        last = leader;
        let member = leader.expect("just found");
        let reads: Vec<_> = (0..KEYS)
            .map(|k| {
                let (clients, recorded) = (clients.clone(), recorded.clone());
                tokio::spawn(async move {
                    let call = Call::Get { key: format!("key{k}") };
                    let invoked = clients.now_nanos();
                    if let Ok(result) = make(&clients, member, &call).await {
                        let returned = clients.now_nanos();
                        let operation = Operation {
                            client: id,
                            call,
                            invoked,
                            returned,
                            result,
                        };
                        recorded.lock().push(operation);
                    }
                })
            })
            .collect();
        for read in reads {
            let _ = read.await;
        }
    }
}
