//! Replacing a member, as etcd's runbook has an operator replace a lost
//! one (its log corrupt) or retire one: remove it from the membership, add
//! a new member at a new peer URL as a learner, start that member with
//! empty data (it learns the membership, and the leader sends it a
//! snapshot), and promote it to a voter once it has caught up. The calls
//! go through the members' own methods (`Member::remove_member`,
//! `add_member`, `promote_member_as_leader`), each retried, a bounded
//! number of times, while the faults make it fail. The members run with
//! `--strict-reconfig-check=false`, so the changes are not refused for
//! want of five calm seconds, which the faults never leave.

use std::sync::Arc;
use std::time::Duration;

use crate::harness::{CallError, Clients, SimCluster};
use parking_lot::Mutex;

/// Tries of each call (remove, add, promote) before the replacement is
/// given up: with [`RETRY_AFTER`], two seconds of faults.
const ATTEMPTS: usize = 100;

/// The pause between two tries.
const RETRY_AFTER: Duration = Duration::from_millis(20);

/// What a task of the replacement left: `None` while it runs.
type Outcome<T> = Arc<Mutex<Option<T>>>;

/// One replacement under way.
pub struct Replacement {
    /// The member replaced (its index, which the new member takes).
    pub member: usize,
    stage: Stage,
}

enum Stage {
    /// Removing the old member and adding the new one as a learner: the
    /// new one's id, or why not.
    Reconfiguring(Outcome<Result<u64, String>>),
    /// Added as `id`: starting it (which fails while no member runs to
    /// give it the membership).
    Starting { id: u64, tries: usize },
    /// Started: promoting it; whether it was.
    Promoting(Outcome<bool>),
}

/// Where a replacement stands.
pub enum Progress {
    Going,
    /// The new member runs; whether it became a voter.
    Done {
        promoted: bool,
    },
    /// Given up, and why: the old member's slot stays empty.
    Abandoned(String),
}

impl Replacement {
    /// Begins replacing member `member`, which is down: removes it and
    /// adds its successor, through the other members.
    pub fn begin(cluster: &SimCluster, member: usize) -> Replacement {
        let outcome = Outcome::default();
        let task = reconfigure(
            cluster.clients(),
            cluster.size(),
            member,
            cluster.id(member),
            cluster.next_joining_url(),
        );
        let written = outcome.clone();
        tokio::spawn(async move {
            let result = task.await;
            *written.lock() = Some(result);
        });
        Replacement {
            member,
            stage: Stage::Reconfiguring(outcome),
        }
    }

    /// Whether the slot is still the replacement's to fill: until the new
    /// member has started, nothing else may start a member there. After,
    /// the new member is down or up as any other.
    pub fn holds_slot(&self) -> bool {
        !matches!(self.stage, Stage::Promoting(_))
    }

    /// Moves the replacement on as far as it can go now.
    pub fn advance(&mut self, cluster: &mut SimCluster) -> Progress {
        match &mut self.stage {
            Stage::Reconfiguring(outcome) => match take(outcome) {
                None => Progress::Going,
                Some(Err(why)) => Progress::Abandoned(why),
                Some(Ok(id)) => {
                    self.stage = Stage::Starting { id, tries: 0 };
                    self.advance(cluster)
                }
            },
            Stage::Starting { id, tries } => {
                let id = *id;
                match cluster.replace(self.member) {
                    Ok(()) => {
                        let outcome = Outcome::default();
                        let written = outcome.clone();
                        let task = promote(cluster.clients(), cluster.size(), id);
                        tokio::spawn(async move {
                            let promoted = task.await;
                            *written.lock() = Some(promoted);
                        });
                        self.stage = Stage::Promoting(outcome);
                        Progress::Going
                    }
                    Err(why) if *tries + 1 >= ATTEMPTS => {
                        Progress::Abandoned(format!("the new member would not start: {why}"))
                    }
                    Err(_) => {
                        *tries += 1;
                        Progress::Going
                    }
                }
            }
            Stage::Promoting(outcome) => match take(outcome) {
                None => Progress::Going,
                Some(promoted) => Progress::Done { promoted },
            },
        }
    }
}

/// What a task left, if it has ended.
fn take<T>(outcome: &Outcome<T>) -> Option<T> {
    outcome.lock().take()
}

/// Removes member `old_id` (at index `old`) and adds a learner at `url`,
/// through the other members in turn; the learner's id.
async fn reconfigure(clients: Clients, members: usize, old: usize, old_id: u64, url: String) -> Result<u64, String> {
    let through = |attempt: usize| (old + 1 + attempt % (members - 1)) % members;
    let mut removed = false;
    for attempt in 0..ATTEMPTS {
        match clients.member_remove(through(attempt), old_id).await {
            Ok(()) => removed = true,
            Err(CallError::Failed(why)) if why == "etcdserver: member not found" => removed = true,
            Err(_) => {}
        }
        if removed {
            break;
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
    if !removed {
        return Err(format!("member {old_id:x} was not removed in {ATTEMPTS} tries"));
    }
    for attempt in 0..ATTEMPTS {
        let via = through(attempt);
        match clients.member_add_learner(via, &url).await {
            Ok(id) => return Ok(id),
            // An earlier try that seemed to fail was applied.
            Err(CallError::Failed(why)) if why == "etcdserver: Peer URLs already exists" => {
                let listed = clients.member_list(via).await.unwrap_or_default();
                if let Some((id, _, _)) = listed.into_iter().find(|(_, urls, _)| urls.contains(&url)) {
                    return Ok(id);
                }
            }
            Err(_) => {}
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
    Err(format!("no learner was added at {url} in {ATTEMPTS} tries"))
}

/// Promotes learner `id`, asking each member in turn (the leader alone
/// may, once the learner has caught up); whether it was.
async fn promote(clients: Clients, members: usize, id: u64) -> bool {
    for attempt in 0..ATTEMPTS {
        match clients.member_promote(attempt % members, id).await {
            Ok(()) => return true,
            // An earlier try that seemed to fail was applied.
            Err(CallError::Failed(why)) if why == "etcdserver: can only promote a learner member" => return true,
            Err(_) => {}
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
    false
}
