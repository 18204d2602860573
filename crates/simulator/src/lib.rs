//! The deterministic simulator: whole clusters of real members, run from
//! seeds, every history checked.
//!
//! # Module map
//! - [`harness`]: whole clusters of real members on one thread and a
//!   simulated clock, over kv-server's seams.
//! - [`seed`]: one seed, run: the cluster ([`harness`]), clients,
//!   faults, the end and its checks.
//! - [`workload`]: the clients' calls, recorded as a history.
//! - [`watchers`]: the watchers, resumed across crashes, recorded.
//! - [`faults`]: the faults injected while the clients run.
//! - [`replace`]: a member replaced, as etcd's runbook does it.
//! - [`check`]: linearizability, convergence, lost writes, the watch
//!   guarantees.
//! - [`broken`]: the builds broken on purpose, which the checks must catch.
//! - [`report`]: many seeds' results, summed up in one line.
//!
//! `docs/design/simulator.md` says how a member is simulated and what is
//! not; `docs/robustness.md` has the runs.

pub mod broken;
pub mod check;
pub mod faults;
pub mod harness;
pub mod replace;
pub mod report;
pub mod seed;
pub mod watchers;
pub mod workload;
