//! Starting a member: open what is on disk, build the member core, start
//! the apply stage and the raft loop on threads of their own, then serve
//! on tokio until SIGINT or SIGTERM.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use crate::apply::input::{ApplyInput, APPLY_QUEUE_CAPACITY};
use crate::apply::stage::Stage;
use crate::config::Config;
use crate::error::Error;
use crate::member::core::{Member, MemberParts};
use crate::member::lessor::Lessor;
use crate::member::waiters::Waiters;
use crate::member::watch_hub::WatchHub;
use crate::membership::Membership;
use crate::peer::snapshot_send::SnapshotSource;
use crate::peer::transport::PeerTransport;
use crate::raft::input::{NodeInput, NODE_INPUT_CAPACITY};
use crate::raft::logger;
use crate::raft::node::{Node, NodeConfig, NodeParts};
use crate::raft::status::RaftStatus;
use crate::server::serve;
use crate::storage::attributes::MemberAttributes;
use crate::storage::durable_log::{DurableLog, LogOwner};
use crate::storage::layout::DataDir;
use crate::storage::marker::SnapshotMarker;

/// What is on disk, opened.
struct Opened {
    dir: DataDir,
    store: Arc<mvcc::Store>,
    log: DurableLog,
    marker: Arc<SnapshotMarker>,
    attributes: Arc<MemberAttributes>,
}

/// Runs a member until it is told to stop. Returns why it could not start.
pub fn run(config: Config) -> Result<(), Error> {
    let membership = Membership::from_config(&config)?;
    if config.initial_cluster_state != "new" && config.initial_cluster_state != "existing" {
        return Err(Error::Flag {
            flag: "initial-cluster-state",
            reason: format!("must be new or existing, not {:?}", config.initial_cluster_state),
        });
    }
    let opened = open(&config, &membership)?;
    tracing::info!(
        name = config.name,
        member_id = format!("{:x}", membership.local_id),
        cluster_id = format!("{:x}", membership.cluster_id),
        data_dir = %opened.dir.root().display(),
        "starting member"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kv-server")
        .build()
        .map_err(|source| Error::Spawn {
            what: "the runtime",
            source,
        })?;
    let (node_sender, node_inputs) = sync_channel(NODE_INPUT_CAPACITY);
    let (apply_sender, apply_inputs) = sync_channel(APPLY_QUEUE_CAPACITY);
    let member = Arc::new(Member::new(MemberParts {
        config: config.clone(),
        membership,
        store: opened.store.clone(),
        status: Arc::new(RaftStatus::default()),
        waiters: Arc::new(Waiters::default()),
        lessor: Arc::new(Lessor::default()),
        watch_hub: Arc::new(WatchHub::default()),
        attributes: opened.attributes.clone(),
        node: node_sender.clone(),
    }));
    let dir = opened.dir.clone();
    start_threads(
        &member,
        opened,
        runtime.handle(),
        (node_sender.clone(), node_inputs),
        (apply_sender, apply_inputs),
    )?;
    runtime.block_on(serve::serve(member, node_sender, dir))
}

/// Opens the data directory, the store and the durable log.
fn open(config: &Config, membership: &Membership) -> Result<Opened, Error> {
    let dir = DataDir::new(config.data_dir());
    dir.create()?;
    let removed = dir.remove_leftover_dumps()?;
    if removed > 0 {
        tracing::info!(removed, "removed snapshot dumps left by the last run");
    }
    let store = mvcc::Store::open_with(&dir.store(), config.max_txn_ops)?;
    let owner = LogOwner {
        cluster_id: membership.cluster_id,
        member_id: membership.local_id,
    };
    let log = DurableLog::open(&dir, owner, membership.voter_ids(), &store)?;
    let recorded = log.memory.rl().hard_state().commit.min(log.snapshot_index);
    Ok(Opened {
        marker: Arc::new(SnapshotMarker::new(dir.snapshot_marker(), recorded)),
        attributes: Arc::new(MemberAttributes::load(dir.attributes())),
        store: Arc::new(store),
        log,
        dir,
    })
}

/// Starts the peer transport on the runtime, then the apply stage and the
/// raft loop on their threads.
fn start_threads(
    member: &Arc<Member>,
    opened: Opened,
    runtime: &tokio::runtime::Handle,
    (node_sender, node_inputs): (SyncSender<NodeInput>, Receiver<NodeInput>),
    (apply_sender, apply_inputs): (SyncSender<ApplyInput>, Receiver<ApplyInput>),
) -> Result<(), Error> {
    let source = Arc::new(SnapshotSource {
        store: opened.store.clone(),
        dir: opened.dir.clone(),
    });
    let transport = PeerTransport::start(&member.membership, node_sender, runtime, &source);
    let node_config = NodeConfig {
        id: member.member_id(),
        tick_interval: member.config.tick_interval(),
        election_ticks: member.config.election_ticks(),
        snapshot_count: member.config.snapshot_count,
        catch_up_entries: member.config.snapshot_catch_up_entries,
    };
    let node = Node::new(
        NodeParts {
            config: node_config,
            log: opened.log,
            store: opened.store.clone(),
            status: member.status.clone(),
            marker: opened.marker.clone(),
            outbox: Box::new(transport),
            apply: apply_sender,
        },
        &logger::logger(),
    )?;
    let stage = Stage {
        member_id: member.member_id(),
        dir: opened.dir,
        store: opened.store,
        status: member.status.clone(),
        waiters: member.waiters.clone(),
        lessor: member.lessor.clone(),
        watch_hub: member.watch_hub.clone(),
        attributes: opened.attributes,
        marker: opened.marker,
    };
    let spawn = |what: &'static str| move |source| Error::Spawn { what, source };
    std::thread::Builder::new()
        .name("apply".into())
        .spawn(move || stage.run(apply_inputs))
        .map_err(spawn("the apply stage"))?;
    std::thread::Builder::new()
        .name("raft".into())
        .spawn(move || node.run(node_inputs))
        .map_err(spawn("the raft loop"))?;
    Ok(())
}
