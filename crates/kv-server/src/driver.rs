//! The seams a driver of whole members works through: the deterministic
//! simulator (`crates/simulator`) runs real members, wired as production
//! wires them, on a clock, an entropy source, a network, a WAL disk and a
//! store power switch (`mvcc::Power`) of its own, and turns their raft loops and apply stages by hand. Nothing
//! here is used by the server itself; it is the list of what the
//! simulator may reach, so the rest of the crate stays private.

pub use crate::apply::input::{ApplyInput, ApplyReceiver};
pub use crate::apply::stage::Stage;
pub use crate::auth::Caller;
pub use crate::clock::Clock;
pub use crate::entropy::Entropy;
pub use crate::error::{Error, RequestError};
pub use crate::flags::loopback::{joining_args, member_args, peer_url};
pub use crate::halt::Fatal;
pub use crate::member::core::Member;
pub use crate::raft::inbox::{NodeReceiver, NodeSender};
pub use crate::raft::input::{NodeInput, Outbox};
pub use crate::raft::node::{Node, INPUTS_PER_READY_MAX};
pub use crate::server::join::membership_from;
pub use crate::server::start::open;
pub use crate::server::wiring::{wire, Opened, Wired, World};
pub use crate::storage::layout::DataDir;
pub use crate::watch::hub::Published;
pub use crate::watch::outbox::{Outgoing, Responses};
pub use crate::watch::stream::{start as start_watch_stream, Opener};
