//! The robustness suite: randomized concurrent workloads against a real
//! 3-member cluster (kv-server, or real etcd as the control), with faults
//! injected, and every history checked for linearizability and for etcd's
//! watch guarantees.
//!
//! # Module map
//! - [`history`]: calls and returns, as recorded.
//! - [`model`]: etcd's semantics for one key, as a sequential model.
//! - [`linearize`]: the linearizability checker (per key, memoized
//!   Wing–Gong search) and the shrinking of a failing history.
//! - [`timeline`]: a failing sub-history drawn as SVG.
//! - [`watch_check`]: etcd's six watch guarantees, and the event history
//!   against the operations (lost writes).
//! - [`workload`]: the clients and what they call; [`call_mix`]: the
//!   call mix and what a client learns, shared with the simulator.
//! - [`watch`]: watchers that resume after a break, and the final read of
//!   the event history.
//! - [`proxy`]: the peer proxy that partitions, delays and drops.
//! - [`cluster`]: the member processes.
//! - [`faults`]: the faults a round injects.
//! - [`round`]: one round, end to end, and its checks.

pub mod call_mix;
pub mod cluster;
pub mod faults;
pub mod history;
pub mod linearize;
pub mod model;
pub mod proxy;
pub mod round;
pub mod timeline;
pub mod watch;
pub mod watch_check;
pub mod workload;
