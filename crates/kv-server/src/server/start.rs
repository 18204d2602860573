//! Starting a member: open what is on disk, wire the member (`wiring`),
//! start the apply stage and the raft loop on threads of their own, then
//! serve on tokio until SIGINT or SIGTERM, or until a fault stops it.

use std::sync::Arc;

use raft::prelude::ConfState;

use crate::config::Config;
use crate::error::Error;
use crate::membership::Membership;
use crate::server::force_new_cluster;
use crate::server::join;
use crate::server::serve;
use crate::server::wiring::{self, Opened, World};
use crate::storage::durable_log::{DurableLog, LogOwner, LogStart};
use crate::storage::layout::DataDir;
use crate::storage::marker::SnapshotMarker;

/// The term a new cluster's log starts in.
const BOOTSTRAP_TERM: u64 = 1;

/// Workers of the runtime that serves the peer port (raft streams,
/// snapshots, forwarded lease calls). A runtime apart from the clients'
/// one, so that client handlers waiting on the store (a stalled store
/// holds every worker they have) cannot starve the raft messages, and so
/// the leader's heartbeats and followers' answers, into an election. One
/// is enough: each received batch is decoded and handed to the raft loop.
pub const PEER_RUNTIME_WORKERS: usize = 1;

/// Runs a member until it is told to stop. Returns why it could not start.
pub fn run(mut config: Config) -> Result<(), Error> {
    refuse_before_start(&config)?;
    if config.experimental_enable_lease_checkpoint && !config.experimental_enable_lease_checkpoint_persist {
        tracing::warn!(
            "Detected that checkpointing is enabled without persistence. Consider enabling \
             experimental-enable-lease-checkpoint-persist"
        );
    }
    for flag in config.peer_timeouts().1 {
        tracing::info!("{flag} increased to minimum value: {:?}", crate::peer::PEER_TIMEOUT_MIN);
    }
    // Auto-TLS's files are the first thing written to the data directory.
    let mut client_urls = crate::config::urls(&config.listen_client_urls);
    client_urls.extend(crate::config::urls(&config.listen_client_http_urls));
    let peer_urls = crate::config::urls(&config.listen_peer_urls);
    config
        .tls
        .make_auto_files(&config.data_dir(), &client_urls, &peer_urls)?;
    let dials_https = config.initial_cluster.contains("https://");
    if let Some(dial) = config.tls.peer_dial(dials_https)? {
        crate::peer::channels::use_peer_tls(dial);
    }
    let opened = open(
        &config,
        wal::Options::default(),
        mvcc::Power::default(),
        &join::fetch_membership,
    )?;
    let membership = opened.membership.clone();
    crate::metrics::metrics().describe_member(membership.local_id, config.quota_backend_bytes);
    crate::metrics::metrics().set_level(&config.metrics);
    crate::metrics::set_warning_apply_duration(config.experimental_warning_apply_duration);
    // Without the metrics feature no observer is installed, so the store
    // does not time its applies and commits either.
    #[cfg(feature = "metrics")]
    opened
        .store
        .observe_with(Arc::new(crate::metrics::StoreObserver::default()));
    tracing::info!(
        name = config.name,
        member_id = format!("{:x}", membership.local_id),
        cluster_id = format!("{:x}", membership.cluster_id),
        data_dir = %opened.dir.root().display(),
        "starting member"
    );
    let (runtime, peer_runtime) = runtimes()?;
    let dir = opened.dir.clone();
    // The threads run detached: the server stops them through the member.
    let (member, node_sender, _threads) = wiring::wire(&config, opened, runtime.handle(), World::real())?.spawn()?;
    let served = runtime.block_on(serve::serve(member, node_sender, dir, peer_runtime.handle().clone()));
    // Both runtimes end here, outside any runtime's context. After a
    // fault nothing is waited for: the member is gone, and its tasks with
    // it, as when it exited.
    if served.is_err() {
        runtime.shutdown_background();
        peer_runtime.shutdown_background();
    } else {
        drop(runtime);
        drop(peer_runtime);
    }
    served
}

/// Every setting refused before anything on disk is touched, as etcd
/// refuses them before it starts: flags that cannot work together, TLS
/// settings, auto-compaction's retention, and the data directory
/// conflicts of `--wal-dir` and `--force-new-cluster`.
fn refuse_before_start(config: &Config) -> Result<(), Error> {
    if config.initial_cluster_state != "new" && config.initial_cluster_state != "existing" {
        return Err(Error::Flag {
            flag: "initial-cluster-state",
            reason: format!("must be new or existing, not {:?}", config.initial_cluster_state),
        });
    }
    crate::server::compactor::retention(&config.auto_compaction_mode, &config.auto_compaction_retention)?;
    if config.experimental_compact_hash_check_time.is_zero() {
        return Err(Error::Flag {
            flag: "experimental-compact-hash-check-time",
            reason: "must be >0 (set to 0s)".into(),
        });
    }
    if config.experimental_enable_lease_checkpoint_persist && !config.experimental_enable_lease_checkpoint {
        return Err(Error::FlagConflict(
            "setting experimental-enable-lease-checkpoint-persist requires experimental-enable-lease-checkpoint",
        ));
    }
    config.tls.check()?;
    crate::config::check_listen_urls(config)?;
    let dir = config.layout();
    check_wal_dir(&dir)?;
    if config.force_new_cluster {
        force_new_cluster::refuse_empty(&dir)?;
    }
    Ok(())
}

/// The clients' runtime and the peer port's (see [`PEER_RUNTIME_WORKERS`]).
/// The clients' runtime has one worker per CPU this process may run on;
/// on a single CPU (a member pinned with `taskset`, or a pod with one
/// core) it is a current-thread runtime instead, driven by the thread
/// that starts the member: one worker of the work-stealing scheduler
/// pays for stealing and cross-thread wake-ups it cannot use there
/// (`docs/benchmarks/history.md`, fifth round).
fn runtimes() -> Result<(tokio::runtime::Runtime, tokio::runtime::Runtime), Error> {
    let single_cpu = std::thread::available_parallelism().is_ok_and(|cpus| cpus.get() == 1);
    let mut builder = if single_cpu {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = builder
        .enable_all()
        .thread_name("kv-server")
        .build()
        .map_err(|source| Error::Spawn {
            what: "the runtime",
            source,
        })?;
    let peer_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(PEER_RUNTIME_WORKERS)
        .enable_all()
        .thread_name("kv-peer")
        .build()
        .map_err(|source| Error::Spawn {
            what: "the peer runtime",
            source,
        })?;
    Ok((runtime, peer_runtime))
}

/// Opens the data directory, the store and the durable log, creating the
/// log (and for a new cluster, the membership) on the first start. The
/// log is opened with `wal_options`: the defaults in production; a
/// simulator's disk (see `wal::Disk`) and smaller segments elsewhere. A
/// member joining a running cluster learns the membership through `join`.
pub fn open(
    config: &Config,
    wal_options: wal::Options,
    store_power: mvcc::Power,
    join: &join::Join,
) -> Result<Opened, Error> {
    let dir = config.layout();
    dir.create()?;
    let removed = dir.remove_leftover_dumps()?;
    if removed > 0 {
        tracing::info!(removed, "removed snapshot dumps left by the last run");
    }
    if dir.unfinished_restore().exists() {
        return Err(Error::UnfinishedRestore {
            dir: dir.root().to_path_buf(),
        });
    }
    let store = mvcc::Store::open_powered(&dir.store(), config.max_txn_ops, store_power)?;
    store.set_compaction_batch_limit(config.experimental_compaction_batch_limit);
    if DurableLog::exists(&dir) {
        store_legacy_membership(config, &store)?;
    } else {
        create_log(config, &dir, &store, &wal_options, join)?;
    }
    let (mut log, owner) = DurableLog::open(&dir, &store, wal_options, |store| {
        Ok(stored_membership(store, 0)?.map_or_else(ConfState::default, |m| m.conf_state()))
    })?;
    let membership = match stored_membership(&store, owner.member_id)? {
        Some(membership) => membership,
        // A joining member whose first snapshot has not arrived yet.
        None => join(config, Some(owner.member_id))?,
    };
    if membership.local().is_none() {
        return Err(Error::Removed);
    }
    if config.force_new_cluster {
        force_new_cluster::rewrite(&mut log, store.consistent_index(), &membership)?;
    }
    let recorded = log.memory.rl().hard_state().commit.min(log.snapshot_index);
    Ok(Opened {
        marker: Arc::new(SnapshotMarker::new(dir.snapshot_marker(), recorded)),
        store: Arc::new(store),
        log,
        dir,
        membership,
    })
}

/// Refuses a `--wal-dir` that would lose the log, before anything is
/// written. etcd takes both cases below and loses the data: a WAL
/// directory equal to the data directory makes its first WAL replace the
/// whole data directory; a WAL moved without `--wal-dir` following it (or
/// `--wal-dir` given to a member whose WAL is still in the data directory)
/// starts a new, empty log over the old store, and writes then hang.
fn check_wal_dir(dir: &DataDir) -> Result<(), Error> {
    let flag = |reason: String| Error::Flag {
        flag: "wal-dir",
        reason,
    };
    let same = |a: &std::path::Path, b: &std::path::Path| {
        a == b
            || std::fs::canonicalize(a)
                .ok()
                .zip(std::fs::canonicalize(b).ok())
                .is_some_and(|(a, b)| a == b)
    };
    if let Some(wal) = dir.dedicated_wal() {
        if same(wal, dir.root()) || same(wal, &dir.member()) {
            return Err(flag(format!(
                "{} is the data directory; give the WAL a directory of its own",
                wal.display()
            )));
        }
        if !DurableLog::exists(dir) && wal::Wal::exists(&dir.default_wal()) {
            return Err(flag(format!(
                "{} holds no WAL, but {} does: move it there, or start without --wal-dir",
                wal.display(),
                dir.default_wal().display()
            )));
        }
    }
    let store = dir.store();
    if !DurableLog::exists(dir) && store.exists() && !dir.unfinished_restore().exists() {
        let applied = mvcc::Store::open(&store).map(|store| store.membership().0).unwrap_or(0);
        if applied > 0 {
            return Err(flag(format!(
                "no WAL in {}, but the store in {} holds applied entries: give --wal-dir the directory the WAL was moved to",
                dir.wal().display(),
                dir.root().display()
            )));
        }
    }
    Ok(())
}

/// The membership the store holds, seen from member `local_id`.
fn stored_membership(store: &mvcc::Store, local_id: u64) -> Result<Option<Membership>, Error> {
    match store.membership().1 {
        Some(bytes) => Ok(Some(Membership::decode(&bytes, local_id)?)),
        None => Ok(None),
    }
}

/// A data directory written before the membership was stored holds none
/// in a store that has applied entries (a joining member's store is empty
/// until its first snapshot, which brings the membership). Its cluster
/// was always the one its flags describe, so the membership is taken from
/// them, once, at the store's consistent index, as every such member does
/// alike.
fn store_legacy_membership(config: &Config, store: &mvcc::Store) -> Result<(), Error> {
    let (index, record) = store.membership();
    if record.is_some() || index == 0 {
        return Ok(());
    }
    let membership = Membership::new_cluster(&config.initial_cluster, &config.initial_cluster_token, &config.name)?;
    store.apply(index, &[mvcc::WriteRequest::Membership(membership.encode())])?;
    store.flush()?;
    tracing::info!("stored the membership from --initial-cluster: the data directory predates stored membership");
    Ok(())
}

/// A first start: a member of a new cluster writes the membership from its
/// flags; a member joining a running cluster learns it from the others
/// and starts with an empty log.
fn create_log(
    config: &Config,
    dir: &DataDir,
    store: &mvcc::Store,
    wal_options: &wal::Options,
    join: &join::Join,
) -> Result<(), Error> {
    // A restore stopped part way leaves the store marked; starting would
    // serve part of the backup.
    if store.is_restoring()? {
        return Err(Error::UnfinishedRestore {
            dir: dir.root().to_path_buf(),
        });
    }
    if config.initial_cluster_state == "existing" {
        let membership = join(config, None)?;
        return DurableLog::create(dir, owner_of(&membership), LogStart::Empty, wal_options);
    }
    let membership = Membership::new_cluster(&config.initial_cluster, &config.initial_cluster_token, &config.name)?;
    bootstrap(dir, &membership, wal_options, |index| {
        store.apply(index, &[mvcc::WriteRequest::Membership(membership.encode())])?;
        store.flush()?;
        Ok(())
    })
}

fn owner_of(membership: &Membership) -> LogOwner {
    LogOwner {
        cluster_id: membership.cluster_id,
        member_id: membership.local_id,
    }
}

/// Starts a new cluster's member from what `write_store(index)` puts in
/// the store (the membership, and for a restore the backup's data, at
/// consistent index `index`): the marker records a snapshot there, and
/// the log starts after it (see [`LogStart::After`]). As etcd, the index
/// is the number of members. Each step may be redone after a crash: the
/// log, made last and whole, says whether the start finished. The log is
/// created with `wal_options`.
pub fn bootstrap(
    dir: &DataDir,
    membership: &Membership,
    wal_options: &wal::Options,
    write_store: impl FnOnce(u64) -> Result<(), Error>,
) -> Result<(), Error> {
    let index = membership.members.len() as u64;
    write_store(index)?;
    SnapshotMarker::overwrite(&dir.snapshot_marker(), index, BOOTSTRAP_TERM)?;
    let start = LogStart::After {
        index,
        term: BOOTSTRAP_TERM,
        conf_state: membership.conf_state(),
    };
    DurableLog::create(dir, owner_of(membership), start, wal_options)
}
