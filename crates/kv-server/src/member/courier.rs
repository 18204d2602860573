//! Answers carried to the clients' runtime, one wake-up per batch.
//!
//! The apply stage and the raft loop run on threads of their own. A
//! client's handler waits on the clients' runtime for a oneshot, and a
//! oneshot sent from another thread wakes its task from outside the
//! runtime: tokio pushes it onto the runtime's shared queue and writes the
//! runtime's eventfd, a system call per answer. The runtime then takes those
//! tasks one at a time, each answer's connection is flushed before the
//! next answer's task runs, and every answer leaves in a `writev` of its
//! own.
//!
//! So the stage and the loop hand a batch's answers to the courier, and
//! one task on the clients' runtime sends them: one wake from outside per
//! batch, and the answers' tasks woken from inside, all queued before any
//! connection writes, so a connection's answers of one batch leave
//! together (the system calls before and after: docs/benchmarks/history.md,
//! eighth round). What the courier holds is bounded by the waiters it
//! answers: each delivery ends one registered proposal or read.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use crate::error::RequestError;
use crate::raft::input::ReadWaiter;

/// How a proposal ends: applied (with the store's answer), or failed.
pub type ProposalResult = Result<mvcc::Applied, RequestError>;

/// One answer, and where it goes.
pub enum Delivery {
    Proposal(oneshot::Sender<ProposalResult>, ProposalResult),
    Read(ReadWaiter, Result<(), RequestError>),
}

impl Delivery {
    /// A waiter that gave up has dropped its receiver: nothing to do.
    fn deliver(self) {
        match self {
            Delivery::Proposal(waiter, result) => {
                let _ = waiter.send(result);
            }
            Delivery::Read(waiter, result) => {
                let _ = waiter.send(result);
            }
        }
    }
}

#[derive(Default)]
struct Queue {
    deliveries: Vec<Delivery>,
    /// Set by [`Courier::close`]: nothing more is carried.
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Rung once per batch; the task takes everything queued by then.
    bell: Notify,
}

/// The handle the apply stage and the raft loop hand answers to.
#[derive(Clone)]
pub struct Courier {
    shared: Arc<Shared>,
}

impl Courier {
    /// A courier whose task runs on `runtime` (the clients'), until the
    /// courier is closed.
    pub fn start(runtime: &tokio::runtime::Handle) -> (Courier, tokio::task::JoinHandle<()>) {
        let shared = Arc::new(Shared::default());
        let task = runtime.spawn(run(shared.clone()));
        (Courier { shared }, task)
    }

    /// Queues a batch of answers and wakes the task.
    pub fn send(&self, mut deliveries: Vec<Delivery>) {
        if deliveries.is_empty() {
            return;
        }
        {
            let mut queue = self.shared.queue.lock();
            if queue.closed {
                return;
            }
            if queue.deliveries.is_empty() {
                std::mem::swap(&mut queue.deliveries, &mut deliveries);
            } else {
                queue.deliveries.append(&mut deliveries);
            }
        }
        self.shared.bell.notify_one();
    }

    /// Drops what is queued and ends the task: the member stopped, and
    /// its waiters hear so by their senders' drop.
    pub fn close(&self) {
        let dropped = {
            let mut queue = self.shared.queue.lock();
            queue.closed = true;
            std::mem::take(&mut queue.deliveries)
        };
        drop(dropped);
        self.shared.bell.notify_one();
    }
}

async fn run(shared: Arc<Shared>) {
    let mut batch = Vec::new();
    loop {
        shared.bell.notified().await;
        {
            let mut queue = shared.queue.lock();
            if queue.closed {
                return;
            }
            // Swapped, so that the two vectors' capacity is kept between
            // batches.
            std::mem::swap(&mut batch, &mut queue.deliveries);
        }
        for delivery in batch.drain(..) {
            delivery.deliver();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every answer handed over reaches its waiter, and a closed
    // courier carries nothing more. Method: a current-thread
    // runtime runs the task; batches are sent from another thread, as
    // the apply stage does.
    #[test]
    fn carries_batches_from_another_thread_until_closed() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (courier, task) = Courier::start(runtime.handle());
        let mut answers = Vec::new();
        let mut deliveries = Vec::new();
        for _ in 0..3 {
            let (waiter, answer) = oneshot::channel();
            deliveries.push(Delivery::Read(waiter, Ok(())));
            answers.push(answer);
        }
        let sender = courier.clone();
        std::thread::spawn(move || sender.send(deliveries)).join().unwrap();
        runtime.block_on(async {
            for answer in answers {
                assert!(matches!(answer.await, Ok(Ok(()))));
            }
        });

        courier.close();
        let (waiter, answer) = oneshot::channel();
        courier.send(vec![Delivery::Read(waiter, Ok(()))]);
        runtime.block_on(async {
            task.await.unwrap();
            assert!(answer.await.is_err(), "a closed courier drops what it is given");
        });
    }
}
