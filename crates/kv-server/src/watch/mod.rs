//! The watch engine: etcd's watch streams, each carrying any number of
//! watchers, each a key or range followed from a revision on. The gRPC
//! service (`api::watch`) and the gateway are thin adapters over it; the
//! member's side of what a stream reads is `member::watch_source`.
//!
//! Each stream is one task (`stream`). It owns its watchers and its
//! place in the `WatchHub` ([`hub`]), and answers, in the order etcd
//! does:
//! - a create with a `created` response (header at the store's revision),
//!   then, if the watcher starts in the past, the history from its start
//!   revision, read from the store;
//! - each applied batch with one response per watcher it concerns (the
//!   header at the batch's last revision);
//! - a cancel with a `canceled` response; a progress request with a
//!   response for watch id -1 once every watcher has seen every revision up
//!   to its header (etcd 3.5's `RequestProgressAll`);
//! - and, for watchers created with `progress_notify`, an empty response
//!   every `--experimental-watch-progress-notify-interval` while they have
//!   nothing pending.
//!
//! A watcher whose next revision is below the compact revision is cancelled
//! with `compact_revision` set, as etcd does.
//!
//! Delivery: each applied batch's events are encoded for the wire once,
//! by the first stream that needs them, and every watcher of every stream
//! that receives an event shares those bytes (`proto::watch_wire`). A
//! stream's responses wait in its outbox (`outbox.rs`) until its
//! connection has room to send; a watcher's events that arrive while its
//! response waits join it, so a slow client gets fewer, larger responses,
//! as etcd batches the events of its "victim" watchers. Past
//! `WATCH_STREAM_PENDING_BYTES_MAX` waiting bytes the stream lets go of
//! its place in the hub; once the client has read enough, it takes a
//! place again and reads what it missed from the store's history. So
//! nothing is lost, memory stays bounded, and the apply stage never waits
//! on a client.
//!
//! A watch stream is served by the member it reaches, from its own applied
//! state, leader or not. With the `hasleader` metadata that etcd's clients
//! send for `WithRequireLeader` (Kubernetes does), a stream is refused
//! while there is no leader, and ends with "no leader" after
//! `NO_LEADER_CHECKS` election timeouts without one, as etcd's do.

//!
//! # Module map
//! - [`hub`]: what the apply stage publishes to the streams, bounded.
//! - [`codec`]: requests decoded, responses encoded whole or from pieces.
//! - [`stream`]: one stream's task: creates, cancels, progress, delivery
//!   from the hub, catch-up from history.
//! - [`id_hash`]: a cheap hash for the maps keyed by watcher serials.
//! - [`matcher`]: a stream's watchers grouped by what they watch, and
//!   which groups an event concerns.
//! - [`outbox`]: a stream's responses until its connection takes them,
//!   with their bound.
//! - [`pacing`]: which watchers of a busy stream wait for their next
//!   response, so that their events merge.
//! - [`watcher`]: one watcher and its filters.

pub mod codec;
pub mod hub;
pub mod id_hash;
pub mod matcher;
pub mod outbox;
pub mod pacing;
pub mod stream;
pub mod watcher;
