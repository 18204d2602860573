//! A member's fatal fault: what it is, and how it reaches `main`.
//!
//! Some failures leave a member nothing safe to do but stop: a failed WAL
//! write or fsync, a store that cannot apply, a snapshot that cannot be
//! installed, a peer saying this member was removed. Going on could
//! acknowledge a write that is not durable, or serve data that is wrong.
//!
//! The part that meets one returns a [`Fatal`] up to the top of its thread
//! or task, which raises it on the member's [`Halt`] and ends. Nothing
//! below `main` exits the process: the server's run loop waits on the
//! `Halt` beside its signals, stops serving and returns the fault, and
//! `main` exits with status 1, as etcd does. A supervisor restarts the
//! member, which recovers from its WAL and the other members. In one
//! process holding several members (the in-process cluster tests), one
//! member's fault stops that member and no other.

use std::fmt::{self, Display};

use tokio::sync::watch;

/// A failure the member cannot go on after: what failed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    what: String,
    cause: String,
}

impl Fatal {
    /// A fault, logged as it is made: the log says what failed even if
    /// the process is killed before the fault reaches `main`.
    pub fn new(what: impl Into<String>, cause: &dyn Display) -> Fatal {
        let fatal = Fatal {
            what: what.into(),
            cause: cause.to_string(),
        };
        tracing::error!(cause = %fatal.cause, "{}; stopping the member", fatal.what);
        fatal
    }

    /// What failed.
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.cause)
    }
}

impl std::error::Error for Fatal {}

/// The member's stop signal for faults, shared by its threads and tasks.
/// The first fault raised is the one kept; later ones are logged (when
/// made) and dropped, since the member is stopping anyway.
#[derive(Clone)]
pub struct Halt {
    raised: watch::Sender<Option<Fatal>>,
}

impl Default for Halt {
    fn default() -> Halt {
        Halt {
            raised: watch::Sender::new(None),
        }
    }
}

impl Halt {
    /// Raises `fault`, unless one was raised before. Callable from any
    /// thread, inside a runtime or not.
    pub fn raise(&self, fault: Fatal) {
        self.raised.send_if_modified(|raised| {
            if raised.is_some() {
                return false;
            }
            *raised = Some(fault);
            true
        });
    }

    /// Runs the body of one of the member's threads, `what`: a fault it
    /// returns is raised here, and so is a panic, which is an invariant
    /// that failed (the raft loop and the apply stage assert theirs in
    /// every build). Either way the thread ends and the member stops,
    /// rather than going on without the part that failed.
    pub fn guard(&self, what: &str, body: impl FnOnce() -> Result<(), Fatal>) {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(Ok(())) => {}
            Ok(Err(fault)) => self.raise(fault),
            Err(panic) => {
                let message = match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
                    (Some(message), _) => message.to_string(),
                    (None, Some(message)) => message.clone(),
                    (None, None) => "a panic without a message".to_string(),
                };
                self.raise(Fatal::new(format!("{what} panicked"), &message));
            }
        }
    }

    /// The fault raised, if any.
    pub fn raised(&self) -> Option<Fatal> {
        self.raised.borrow().clone()
    }

    /// Waits until a fault is raised, and returns it.
    pub async fn wait(&self) -> Fatal {
        let mut raised = self.raised.subscribe();
        let waited = raised.wait_for(Option::is_some).await;
        // The sender lives in `self`, so the wait can only end with a fault.
        match waited {
            Ok(fault) => fault.clone().expect("waited for a fault"),
            Err(_) => unreachable!("the halt's sender outlives its waiters"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_fault_raised_is_kept_and_wakes_a_waiter() {
        let halt = Halt::default();
        assert_eq!(halt.raised(), None);
        let waiter = tokio::spawn({
            let halt = halt.clone();
            async move { halt.wait().await }
        });
        let raiser = halt.clone();
        std::thread::spawn(move || {
            raiser.raise(Fatal::new("WAL write failed", &"fsync: input/output error"));
            raiser.raise(Fatal::new("the apply stage stopped", &"its queue is closed"));
        })
        .join()
        .unwrap();
        let fault = waiter.await.unwrap();
        assert_eq!(fault.what(), "WAL write failed");
        assert_eq!(fault.to_string(), "WAL write failed: fsync: input/output error");
        assert_eq!(halt.raised(), Some(fault));
    }

    #[test]
    fn a_guarded_body_raises_its_fault_or_its_panic() {
        let halt = Halt::default();
        halt.guard("the apply stage", || Ok(()));
        assert_eq!(halt.raised(), None, "a clean end raises nothing");
        let panicked = Halt::default();
        std::thread::spawn({
            let panicked = panicked.clone();
            move || panicked.guard("the raft loop", || panic!("committed entries are contiguous"))
        })
        .join()
        .expect("the guard caught the panic");
        let fault = panicked.raised().expect("the panic was raised");
        assert_eq!(fault.what(), "the raft loop panicked");
        assert_eq!(
            fault.to_string(),
            "the raft loop panicked: committed entries are contiguous"
        );
        halt.guard("the raft loop", || Err(Fatal::new("WAL write failed", &"disk gone")));
        assert_eq!(
            halt.raised().map(|f| f.to_string()),
            Some("WAL write failed: disk gone".into())
        );
    }

    #[tokio::test]
    async fn a_fault_raised_before_the_wait_is_seen_at_once() {
        let halt = Halt::default();
        halt.raise(Fatal::new("the store could not flush", &"disk full"));
        assert_eq!(halt.wait().await.what(), "the store could not flush");
    }
}
