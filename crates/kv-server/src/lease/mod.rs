//! etcd's leases, as the member serves them.
//!
//! - [`operations`]: grant, revoke, keep-alive, time-to-live and the
//!   leader's expiry and checkpoint rounds, as the member core's methods;
//!   keep-alives and time-to-live go to the leader, who alone tracks
//!   deadlines.
//! - [`lessor`]: the leader's lease deadlines and checkpoint schedule.
//! - [`ids`]: lease ids shaped as etcd's.
//!
//! The store keeps each lease's record and attached keys (`mvcc::lease`);
//! the gRPC service (`api::lease`) and the gateway are adapters over
//! [`operations`].

pub mod ids;
pub mod lessor;
pub mod operations;
