//! The simulated watchers: each a tokio task on the simulator's runtime
//! that follows every key the clients write, from the first revision on,
//! through the real watch stream of a member drawn per session
//! (`crate::harness::SimWatch`). A stream its member's crash ends is
//! resumed on a member drawn anew, from the revision after the last one
//! it reached, as etcd's clients resume a broken watch. A watcher
//! cancelled because that revision was compacted starts a new log at the
//! compact revision, as a client must. Each asks for progress now and
//! then, so bookmarks are checked too. What each receives is checked by
//! the robustness suite's watch checks (`robustness::watch_check`).

use std::sync::Arc;
use std::time::Duration;

use crate::harness::{Clients, Rng};
use kv_server::proto::etcdserverpb as pb;
use parking_lot::Mutex;
use robustness::watch::{prefix_end, reached, record};
use robustness::watch_check::{Session, WatcherLog};
use tokio::sync::watch;

/// Watchers per seed: two, so that they often read different members.
pub const WATCHERS: usize = 2;

/// What the watchers follow: every key the clients write (`key0`…).
pub const PREFIX: &str = "key";

/// How often a watcher asks for a progress notification.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// How long a watcher waits before it opens its next session.
const RESUME_AFTER: Duration = Duration::from_millis(20);

/// Sessions one watcher opens at most: bounds a run whatever its members
/// do (a run's crashes and refusals take a few dozen).
const SESSIONS_MAX: usize = 1_000;

/// A watcher's logs: one, and a new one after each compaction that
/// cancelled it.
pub type Logs = Arc<Mutex<Vec<WatcherLog>>>;

/// A seed's watchers while they run.
pub struct Watching {
    until: watch::Sender<Option<i64>>,
    logs: Vec<Logs>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watching {
    /// Starts [`WATCHERS`] watchers over members `0..members`, each with a
    /// generator forked from `seeds`.
    pub fn start(clients: &Clients, members: usize, seeds: &mut Rng) -> Watching {
        let (until, receiver) = watch::channel(None);
        let logs: Vec<Logs> = (0..WATCHERS).map(|_| Logs::default()).collect();
        let tasks = logs
            .iter()
            .map(|logs| {
                let task = run_watcher(clients.clone(), members, seeds.fork(), receiver.clone(), logs.clone());
                tokio::spawn(task)
            })
            .collect();
        Watching { until, logs, tasks }
    }

    /// Lets each watcher stop once it has reached revision `last`.
    pub fn stop_at(&self, last: i64) {
        self.until.send_replace(Some(last));
    }

    pub fn finished(&self) -> bool {
        self.tasks.iter().all(|task| task.is_finished())
    }

    /// The watchers still running.
    pub fn running(&self) -> Vec<usize> {
        (0..self.tasks.len())
            .filter(|&w| !self.tasks[w].is_finished())
            .collect()
    }

    /// Each watcher's logs so far.
    pub fn logs(&self) -> Vec<Vec<WatcherLog>> {
        self.logs.iter().map(|logs| logs.lock().clone()).collect()
    }
}

/// Runs one watcher over members `0..members` until `until` names a
/// revision it has reached; records into `logs`.
pub async fn run_watcher(
    clients: Clients,
    members: usize,
    mut rng: Rng,
    mut until: watch::Receiver<Option<i64>>,
    logs: Logs,
) {
    logs.lock().push(WatcherLog::default());
    let mut next = 1;
    for _ in 0..SESSIONS_MAX {
        if until.borrow().is_some_and(|last| next > last) {
            return;
        }
        let member = rng.below(members as u64) as usize;
        let create = pb::WatchCreateRequest {
            key: PREFIX.as_bytes().to_vec(),
            range_end: prefix_end(PREFIX),
            start_revision: next,
            ..Default::default()
        };
        if let Ok(stream) = clients.watch(member, create) {
            let (session, compacted) = follow(stream, next, &mut until).await;
            next = reached(&session) + 1;
            let mut logs = logs.lock();
            let log = logs.last_mut().expect("one log from the start");
            if !session.received.is_empty() || log.sessions.is_empty() {
                log.sessions.push(session);
            }
            if let Some(compact_revision) = compacted {
                logs.push(WatcherLog::default());
                next = compact_revision;
            }
        }
        tokio::time::sleep(RESUME_AFTER).await;
    }
}

/// Follows one stream from `start` until it ends, it is cancelled, or it
/// has reached `until`; what it received, and the compact revision if it
/// was cancelled for one.
async fn follow(
    mut stream: crate::harness::SimWatch,
    start: i64,
    until: &mut watch::Receiver<Option<i64>>,
) -> (Session, Option<i64>) {
    let mut session = Session {
        start,
        received: Vec::new(),
    };
    let mut at = start - 1;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        if until.borrow().is_some_and(|last| at >= last) {
            return (session, None);
        }
        tokio::select! {
            response = stream.next() => match response {
                Some(Ok(response)) if response.canceled && response.compact_revision > 0 => {
                    return (session, Some(response.compact_revision));
                }
                Some(Ok(response)) => {
                    if !record(&response, &mut session, &mut at) {
                        return (session, None);
                    }
                }
                _ => return (session, None),
            },
            _ = ticker.tick() => {
                stream.request_progress();
            }
            changed = until.changed() => {
                if changed.is_err() {
                    return (session, None);
                }
            }
        }
    }
}
