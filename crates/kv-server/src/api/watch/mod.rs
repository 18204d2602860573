//! etcd's `Watch` service: one bidirectional stream per call, carrying any
//! number of watchers, each a key or range followed from a revision on.
//!
//! Each stream is one task (`stream.rs`). It owns its watchers and its
//! place in the `WatchHub` (`member::watch_hub`), and answers, in the
//! order etcd does:
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
//! Slow clients: while a client's queue (`WATCH_STREAM_QUEUE`) is full,
//! each watcher's new events are gathered and later sent as one response
//! (`queue.rs`), as etcd batches the events of its "victim" watchers.
//! After `WATCH_MERGE_BATCHES` applied batches gathered that way the stream
//! stops reading the hub; once the hub has moved on without it, it reads
//! what it missed from the store's history. So nothing is lost, memory
//! stays bounded, and the apply stage never waits on a client.
//!
//! A watch stream is served by the member it reaches, from its own applied
//! state, leader or not. With the `hasleader` metadata that etcd's clients
//! send for `WithRequireLeader` (Kubernetes does), a stream is refused
//! while there is no leader, and ends with "no leader" after
//! `NO_LEADER_CHECKS` election timeouts without one, as etcd's do.

//!
//! # Module map
//! - [`service`]: the gRPC service; starts a stream per call.
//! - [`stream`]: one stream's task: creates, cancels, progress, delivery
//!   from the hub, catch-up from history.
//! - [`watcher`]: one watcher and its filters.
//! - [`queue`]: events gathered for a slow client, with their bound.
//! - [`fragments`]: events on the wire, and etcd's fragmenting.

pub mod fragments;
pub mod queue;
pub mod service;
pub mod stream;
pub mod watcher;
