//! A member, wired: the one place its core (`Member`), raft loop (`Node`)
//! and apply stage (`Stage`) are built from an opened data directory, with
//! the parts they share. The server (`start.rs`) and the in-process
//! cluster tests build members here, and nowhere else; what differs
//! between them is the member's [`World`]: where its raft messages go,
//! whether it dials its peers, and the clock its apply stage reads.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::Notify;

use crate::apply::input::{self, ApplyReceiver};
use crate::apply::stage::{Stage, StageParts};
use crate::auth::state::AuthState;
use crate::auth::Auth;
use crate::clock::{Clock, RealClock};
use crate::config::Config;
use crate::entropy::{Entropy, OsEntropy};
use crate::error::Error;
use crate::halt::{Fatal, Halt};
use crate::lease::lessor::Lessor;
use crate::member::core::{Member, MemberParts};
use crate::member::courier::Courier;
use crate::member::waiters::Waiters;
use crate::membership::{Membership, SharedMembership};
use crate::peer::snapshot_send::SnapshotSource;
use crate::peer::transport::{PeerSet, PeerTransport};
use crate::raft::inbox::{self, NodeReceiver, NodeSender};
use crate::raft::input::{Outbox, NODE_INPUT_CAPACITY};
use crate::raft::logger;
use crate::raft::node::{Node, NodeConfig, NodeParts, LEADER_WAIT_ELECTIONS};
use crate::raft::status::RaftStatus;
use crate::storage::durable_log::DurableLog;
use crate::storage::layout::DataDir;
use crate::storage::marker::SnapshotMarker;
use crate::watch::hub::WatchHub;

/// What is on disk, opened (`start::open`).
pub struct Opened {
    pub dir: DataDir,
    pub store: Arc<mvcc::Store>,
    pub log: DurableLog,
    pub marker: Arc<SnapshotMarker>,
    pub membership: Membership,
}

/// What the member meets outside itself.
pub struct World {
    /// Where the raft loop's messages go. `None`: to the peers, over the
    /// raft streams the member's peer set dials (production). With an
    /// outbox of its own the member dials no peer.
    pub outbox: Option<Box<dyn Outbox>>,
    /// The member's clock: the apply stage's, the leader's lease
    /// deadlines' and the wall-clock time lease ids and proposal
    /// sequences start from.
    pub clock: Arc<dyn Clock>,
    /// The member's election timeout in ticks, fixed where a simulator's
    /// seed draws it (`NodeConfig::fixed_election_ticks`); `None`: raft
    /// draws its own.
    pub election_ticks: Option<usize>,
    /// The member's randomness (`entropy.rs`).
    pub entropy: Arc<dyn Entropy>,
}

impl World {
    /// Production's: peers over TCP, the real clock.
    pub fn real() -> World {
        World {
            outbox: None,
            clock: Arc::new(RealClock),
            election_ticks: None,
            entropy: Arc::new(OsEntropy),
        }
    }
}

/// A wired member, its raft loop and apply stage not yet running.
pub struct Wired {
    pub member: Arc<Member>,
    pub node: Node,
    pub node_inputs: NodeReceiver,
    /// The raft loop's input, for the server's peer service.
    pub node_sender: NodeSender,
    pub stage: Stage,
    pub apply_inputs: ApplyReceiver,
}

/// Builds a member from `opened` with the settings of `config`; its
/// snapshot senders, peer links and answers' courier run on `runtime`.
pub fn wire(config: &Config, opened: Opened, runtime: &tokio::runtime::Handle, world: World) -> Result<Wired, Error> {
    let (node_sender, node_inputs) = inbox::channel(NODE_INPUT_CAPACITY)?;
    let (apply_sender, apply_inputs) = input::channel();
    let source = Arc::new(SnapshotSource {
        store: opened.store.clone(),
        dir: opened.dir.clone(),
    });
    let (local_id, dials) = (opened.membership.local_id, world.outbox.is_none());
    let lessor = lease_checkpoints(config, &opened.store, world.clock.clone());
    let (halt, timeouts) = (Halt::default(), config.peer_timeouts().0);
    let (courier, _) = Courier::start(runtime);
    let peers = PeerSet::new(local_id, node_sender.clone(), runtime, &source, &halt, timeouts, dials);
    peers.update(&opened.membership);
    let shared = Shared {
        membership: Arc::new(SharedMembership::new(opened.membership)),
        status: Arc::new(RaftStatus::default()),
        waiters: Arc::new(Waiters::new(world.clock.since_epoch(), courier.clone())),
        lessor,
        watch_hub: Arc::new(WatchHub::default()),
        auth: Arc::new(open_auth(config, &opened.store, &world)?),
        peers,
        stop: Arc::new(Notify::new()),
    };
    let outbox = world
        .outbox
        .unwrap_or_else(|| Box::new(PeerTransport::new(shared.peers.clone())));
    let node = Node::new(
        NodeParts {
            config: node_config(config, local_id, world.election_ticks),
            log: opened.log,
            store: opened.store.clone(),
            status: shared.status.clone(),
            marker: opened.marker.clone(),
            outbox,
            apply: apply_sender,
            courier,
        },
        &logger::logger(),
    )?;
    let stage = shared.stage_parts(
        local_id,
        (opened.dir, opened.store.clone(), opened.marker),
        node_sender.clone(),
        config,
    );
    let stage = Stage::new(stage, world.clock.clone());
    let member = Arc::new(Member::new(MemberParts {
        config: config.clone(),
        membership: shared.membership,
        store: opened.store,
        status: shared.status,
        waiters: shared.waiters,
        lessor: shared.lessor,
        watch_hub: shared.watch_hub,
        node: node_sender.clone(),
        peers: shared.peers,
        auth: shared.auth,
        halt,
        stop: shared.stop,
        clock: world.clock,
    }));
    Ok(Wired {
        member,
        node,
        node_inputs,
        node_sender,
        stage,
        apply_inputs,
    })
}

/// The lessor, checkpointing when `config` asks for it, and the store
/// told whether to persist the checkpoints (`lease/lessor.rs`).
fn lease_checkpoints(config: &Config, store: &mvcc::Store, clock: Arc<dyn crate::clock::Clock>) -> Arc<Lessor> {
    store.persist_lease_checkpoints(config.experimental_enable_lease_checkpoint_persist);
    let interval = config
        .experimental_enable_lease_checkpoint
        .then(crate::lease::lessor::lease_checkpoint_interval);
    Arc::new(Lessor::new(clock, interval))
}

/// A member's two threads, running. The server leaves them detached (it
/// stops them through the member); the in-process tests join them.
#[cfg_attr(not(test), allow(dead_code))]
pub struct Threads {
    raft: JoinHandle<()>,
    apply: JoinHandle<()>,
}

impl Threads {
    /// Waits for both to end: the raft loop once it is stopped (or meets
    /// a fault), the apply stage once the loop's end closes its input.
    #[cfg(test)]
    pub fn join(self) {
        let _ = self.raft.join();
        let _ = self.apply.join();
    }
}

impl Wired {
    /// Starts the apply stage and the raft loop on threads of their own,
    /// each guarded by the member's halt (a fault or a panic there stops
    /// the member). Returns the member, the raft loop's input and the
    /// threads.
    pub fn spawn(self) -> Result<(Arc<Member>, NodeSender, Threads), Error> {
        let Wired {
            member,
            node,
            node_inputs,
            node_sender,
            stage,
            apply_inputs,
        } = self;
        let apply = guarded(member.halt(), "apply", "the apply stage", move || {
            stage.run(apply_inputs)
        })?;
        let raft = guarded(member.halt(), "raft", "the raft loop", move || node.run(node_inputs))?;
        Ok((member, node_sender, Threads { raft, apply }))
    }
}

/// Starts `body`, `what` of the member, on a thread named `name`, its
/// fault or panic raised on `halt`.
fn guarded(
    halt: &Halt,
    name: &str,
    what: &'static str,
    body: impl FnOnce() -> Result<(), Fatal> + Send + 'static,
) -> Result<JoinHandle<()>, Error> {
    let halt = halt.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || halt.guard(what, body))
        .map_err(|source| Error::Spawn { what, source })
}

/// The raft loop's settings, from the member's flags and its world's
/// election timeout, if fixed.
fn node_config(config: &Config, id: u64, election_ticks: Option<usize>) -> NodeConfig {
    NodeConfig {
        id,
        tick_interval: config.tick_interval(),
        election_ticks: config.election_ticks(),
        snapshot_count: config.snapshot_count,
        catch_up_entries: config.snapshot_catch_up_entries,
        leader_wait: config.election_timeout() * LEADER_WAIT_ELECTIONS,
        fixed_election_ticks: election_ticks,
        pre_vote: config.pre_vote,
    }
}

/// What the core and the apply stage share: the stage (or the raft loop,
/// for the status) writes each, the core reads it.
struct Shared {
    membership: Arc<SharedMembership>,
    status: Arc<RaftStatus>,
    waiters: Arc<Waiters>,
    lessor: Arc<Lessor>,
    watch_hub: Arc<WatchHub>,
    auth: Arc<Auth>,
    peers: Arc<PeerSet>,
    /// Notified when the member is removed from the cluster.
    stop: Arc<Notify>,
}

impl Shared {
    /// The apply stage's parts: these shared ones, and what the stage
    /// alone writes (the data directory's store and snapshot marker).
    fn stage_parts(
        &self,
        member_id: u64,
        (dir, store, marker): (DataDir, Arc<mvcc::Store>, Arc<SnapshotMarker>),
        node: NodeSender,
        config: &Config,
    ) -> StageParts {
        StageParts {
            member_id,
            dir,
            store,
            status: self.status.clone(),
            waiters: self.waiters.clone(),
            lessor: self.lessor.clone(),
            watch_hub: self.watch_hub.clone(),
            marker,
            membership: self.membership.clone(),
            peers: self.peers.clone(),
            auth: self.auth.clone(),
            stop: self.stop.clone(),
            node,
            compaction_sleep: config.experimental_compaction_sleep_interval,
            quota_bytes: config.quota_backend_bytes,
        }
    }
}

/// The auth state the store holds, served with the auth flags.
fn open_auth(config: &Config, store: &mvcc::Store, world: &World) -> Result<Auth, Error> {
    let state = AuthState::decode(store.auth().as_deref()).map_err(|e| Error::BadAuth(e.to_string()))?;
    let ttl = std::time::Duration::from_secs(config.auth_token_ttl);
    let (clock, entropy) = (world.clock.clone(), world.entropy.clone());
    Ok(Auth::new(state, ttl, config.bcrypt_cost, clock, entropy))
}
