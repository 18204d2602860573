//! etcd's concurrency recipes served by the member: the `Lock` and
//! `Election` services (`v3lockpb`, `v3electionpb`), which etcd serves
//! beside its core services and its gateway exposes too.
//!
//! Each recipe is made of ordinary KV, Lease and Watch calls, made inside
//! the member with the caller's credentials ([`client`]), so it needs
//! nothing of the core the gRPC services do not already use, and is
//! checked as those calls are.
//!
//! - [`client`]: the in-process client, and the waits both recipes share
//!   (until older holders' keys are gone).
//! - [`lock`]: the mutex.
//! - [`election`]: campaigns, proclamations and observers.

pub mod client;
pub mod election;
pub mod lock;
