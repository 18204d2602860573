//! What the raft loop hands the apply stage, in order, and the queue
//! it goes through.
//!
//! The queue is a bounded channel whose receiver never blocks inside it:
//! the stage parks its thread itself, and the sender unparks it only if
//! it said it was about to park. A receiver blocked in the channel is
//! woken by a sender that still holds the channel's lock; on a core the
//! two threads share, the woken stage then ran first, found the lock
//! held, and slept again until the sender let it go: two wake-ups per
//! hand-off where one does (`docs/benchmarks/history.md`, seventh round).
//! Each side puts a `SeqCst` fence between its write and its read, so
//! that the sender either sees the stage parking and unparks it, or the
//! stage sees the input.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SendError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use raft::prelude::Entry;

use crate::error::RequestError;
use crate::raft::input::ReadWaiter;

/// Capacity of the queue from the raft loop, in inputs. An input is at
/// most one Ready's committed entries; 64 of them let raft run ahead of
/// the store by a burst. Past it the raft loop keeps what does not fit
/// in its own backlog rather than wait (see [`APPLY_BACKLOG_MAX`]).
pub const APPLY_QUEUE_CAPACITY: usize = 64;

/// Inputs the raft loop keeps for the apply stage while its queue is
/// full, so that a stalled store (a defragmentation, a slow disk) does
/// not stop the loop's heartbeats and cost an election. The entries they
/// hold are in raft's in-memory log too, until applied. On a leader the
/// backlog stays far below this bound, since writes are refused once the
/// store is 5000 entries behind commit (etcd's "too many requests"); a
/// follower whose store stalls while the leader writes fills it at one
/// input per Ready. Past it the loop waits for the stage, as the last
/// resort that bounds memory: 65,536 Readies are minutes of writes.
pub const APPLY_BACKLOG_MAX: usize = 65_536;

pub enum ApplyInput {
    /// Committed entries, contiguous, in index order.
    Entries(Vec<Entry>),
    /// A snapshot from the leader: the store takes the contents of the
    /// pending snapshot file for `index` and `term` (`storage::pending`).
    Restore { index: u64, term: u64 },
    /// Linearizable reads, released once the store has applied `index`.
    Read { index: u64, waiters: Vec<ReadWaiter> },
    /// Flush the store (everything applied so far, at least `index`) and
    /// tell the raft loop (`NodeInput::Flushed`): the raft loop never
    /// waits for the store itself.
    Flush { index: u64, term: u64 },
    /// Raft refused a proposal: its waiter gets `error`. Going through
    /// the apply stage keeps it the only one that answers writers.
    Dropped { sequence: u64, error: RequestError },
}

impl ApplyInput {
    /// What the input asks of the stage, for its slow-work line.
    pub fn kind(&self) -> &'static str {
        match self {
            ApplyInput::Entries(_) => "entries",
            ApplyInput::Restore { .. } => "restore",
            ApplyInput::Read { .. } => "read",
            ApplyInput::Flush { .. } => "flush",
            ApplyInput::Dropped { .. } => "dropped",
        }
    }
}

/// What the two ends share: whether the stage is parking, and its thread.
#[derive(Default)]
struct Bell {
    parking: AtomicBool,
    stage: OnceLock<Thread>,
}

impl Bell {
    fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.parking.swap(false, Ordering::SeqCst) {
            if let Some(stage) = self.stage.get() {
                stage.unpark();
            }
        }
    }
}

/// The raft loop's end of the queue.
pub struct ApplySender {
    /// Taken on drop, so that the stage, unparked, sees the queue closed.
    queue: Option<SyncSender<ApplyInput>>,
    bell: Arc<Bell>,
}

impl ApplySender {
    fn queue(&self) -> &SyncSender<ApplyInput> {
        self.queue.as_ref().expect("the queue is taken only on drop")
    }

    /// Queues `input` unless the queue is full.
    pub fn try_send(&self, input: ApplyInput) -> Result<(), TrySendError<ApplyInput>> {
        self.queue().try_send(input)?;
        self.bell.ring();
        Ok(())
    }

    /// Queues `input`, waiting for room.
    pub fn send(&self, input: ApplyInput) -> Result<(), SendError<ApplyInput>> {
        self.queue().send(input)?;
        self.bell.ring();
        Ok(())
    }
}

impl Drop for ApplySender {
    fn drop(&mut self) {
        drop(self.queue.take());
        self.bell.ring();
    }
}

/// The apply stage's end of the queue.
pub struct ApplyReceiver {
    queue: Receiver<ApplyInput>,
    bell: Arc<Bell>,
}

impl ApplyReceiver {
    /// The next input, if one is queued (the simulator's way in).
    pub fn try_recv(&self) -> Result<ApplyInput, TryRecvError> {
        self.queue.try_recv()
    }

    /// The next input, waiting at most `wait` for one.
    pub fn recv_timeout(&self, wait: Duration) -> Result<ApplyInput, RecvTimeoutError> {
        let deadline = Instant::now() + wait;
        loop {
            match self.queue.try_recv() {
                Ok(input) => return Ok(input),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RecvTimeoutError::Timeout);
            }
            self.bell.stage.get_or_init(std::thread::current);
            self.bell.parking.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            // The last look before parking: a sender that queued before
            // the flag was up did not unpark.
            match self.queue.try_recv() {
                Err(TryRecvError::Empty) => std::thread::park_timeout(deadline - now),
                received => {
                    self.bell.parking.store(false, Ordering::SeqCst);
                    return received.map_err(|_| RecvTimeoutError::Disconnected);
                }
            }
            self.bell.parking.store(false, Ordering::SeqCst);
        }
    }
}

/// The queue of [`APPLY_QUEUE_CAPACITY`] inputs.
pub fn channel() -> (ApplySender, ApplyReceiver) {
    let (queue, receiver) = sync_channel(APPLY_QUEUE_CAPACITY);
    let bell = Arc::new(Bell::default());
    (
        ApplySender {
            queue: Some(queue),
            bell: bell.clone(),
        },
        ApplyReceiver { queue: receiver, bell },
    )
}
