//! The deterministic simulator's side of the member: whole clusters of
//! real members (the production wiring, the real raft loop, WAL logic,
//! apply stage and store) on one thread and one simulated clock, their
//! world (time, the network between them, the disk under their WAL,
//! process death) the simulator's. The `simulator` crate drives it with
//! a seed: clients, faults and checks. `docs/design/simulator.md` says
//! how, and what is not simulated.
//!
//! - [`cluster`]: the members, the network and the loop that runs them.
//! - [`member`]: one member, its turns taken by the loop; crash, restart.
//! - [`clients`]: the calls clients make, through the core's methods.
//! - [`watch`]: a client's watch streams, on the real stream task.
//! - [`network`]: messages delayed, dropped, duplicated, partitioned.
//! - [`disk`]: the WAL's disk: unsynced writes lost or torn at a crash,
//!   failed syncs, flipped bits.
//! - [`clock`]: tokio's paused clock as the member's clock.
//! - [`rng`]: the seeded generator every choice draws from.

pub mod clients;
pub mod clock;
pub mod cluster;
pub mod disk;
pub mod member;
pub mod network;
pub mod rng;
pub mod watch;

pub use clients::{CallError, Clients, Held};
pub use cluster::{Failure, SimCluster, SimSpec, SimStats, StartError};
pub use disk::CrashLoss;
pub use network::{NetFaults, NetStats};
pub use rng::Rng;
pub use watch::SimWatch;
