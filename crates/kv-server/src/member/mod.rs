//! The member core and what it shares with the apply stage.
//!
//! - [`core`]: `Member`, what every etcd service calls: propose a write
//!   and wait for it to apply, linearize a read, the quota, headers,
//!   MoveLeader. Its lease operations are `crate::lease`'s, and its auth
//!   checks and changes `crate::auth`'s.
//! - [`courier`]: answers carried to the clients' runtime, a batch at a
//!   time.
//! - [`corruption`]: etcd's corruption checks and the CORRUPT alarm.
//! - [`probe`]: the round trip to each peer, for the metrics.
//! - [`read`]: Range and read-only Txn, served as etcd's server serves
//!   them.
//! - [`view`]: what the services read of the member's state.
//! - [`reconfigure`]: membership changes, checked as etcd checks them.
//! - [`tick_advance`]: etcd's election tick advance at start.
//! - [`waiters`]: clients waiting for their proposals to apply.
//! - [`watch_source`]: what a watch stream reads of the core.

pub mod core;
pub mod corruption;
pub mod courier;
pub mod probe;
pub mod read;
pub mod reconfigure;
pub mod tick_advance;
pub mod view;
pub mod waiters;
pub mod watch_source;
