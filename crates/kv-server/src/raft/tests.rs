//! Goal: the raft loop, with the apply stage, a real store and a real WAL
//! per member, works as a cluster without sockets: a proposal while no
//! leader can be elected waits for one, then is refused with "no leader";
//! a leader is elected; proposals
//! through the leader and through a follower commit and apply on every
//! member; a follower's ReadIndex read sees every acknowledged write; when
//! the leader is cut off the others elect a new one and take writes, and
//! the old leader catches up once it is back.
//!
//! Method: three members in one process, as raft-rs's `five_mem_node`
//! example runs them. Each has its own temporary data directory and its
//! loop and apply stage on threads of their own; their outboxes deliver
//! raft messages into each other's input queues through a `Network` that
//! can cut a member off. Ticks are 10 ms, so an election takes a fraction
//! of a second. Every wait is bounded.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message as _;
use raft::prelude::Message;

use crate::apply::input::APPLY_QUEUE_CAPACITY;
use crate::apply::stage::Stage;
use crate::auth::state::AuthState;
use crate::auth::{Auth, Caller};
use crate::error::RequestError;
use crate::member::lessor::Lessor;
use crate::member::waiters::Waiters;
use crate::member::watch_hub::WatchHub;
use crate::membership::{Member as ClusterMember, Membership, SharedMembership};
use crate::peer::snapshot_send::SnapshotSource;
use crate::peer::transport::PeerSet;
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::{auth_request, raft_request, AuthRequest, RaftRequest};
use crate::raft::input::{NodeInput, Outbox, NODE_INPUT_CAPACITY};
use crate::raft::node::{Node, NodeConfig, NodeParts, SNAPSHOT_CATCH_UP_ENTRIES_DEFAULT};
use crate::raft::status::RaftStatus;
use crate::server::start::bootstrap;
use crate::storage::durable_log::DurableLog;
use crate::storage::layout::DataDir;
use crate::storage::marker::SnapshotMarker;

/// Bounds every wait: an election or a commit takes well under a second
/// at 10 ms ticks, even on a loaded machine.
const WITHIN: Duration = Duration::from_secs(10);
const TICK: Duration = Duration::from_millis(10);
const VOTERS: [u64; 3] = [1, 2, 3];

/// Delivers raft messages between members' input queues; a member cut
/// off neither sends nor receives.
#[derive(Clone, Default)]
struct Network {
    inputs: Arc<Mutex<HashMap<u64, SyncSender<NodeInput>>>>,
    cut_off: Arc<Mutex<HashSet<u64>>>,
}

struct ChannelOutbox {
    from: u64,
    network: Network,
}

impl Outbox for ChannelOutbox {
    fn send(&mut self, messages: Vec<Message>) {
        let cut_off = self.network.cut_off.lock().clone();
        let inputs = self.network.inputs.lock();
        for message in messages {
            if cut_off.contains(&self.from) || cut_off.contains(&message.to) {
                continue;
            }
            if let Some(input) = inputs.get(&message.to) {
                let _ = input.try_send(NodeInput::Message(Box::new(message)));
            }
        }
    }
}

struct TestMember {
    id: u64,
    /// The apply stage's thread, which ends once the raft loop has (its
    /// queue's sender goes with the loop): joined on drop, so that no
    /// store of a finished test writes into its removed directory.
    stage: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
    input: SyncSender<NodeInput>,
    status: Arc<RaftStatus>,
    waiters: Arc<Waiters>,
    store: Arc<mvcc::Store>,
    auth: Arc<Auth>,
}

fn start(id: u64, network: &Network) -> TestMember {
    let temporary = tempfile::tempdir().unwrap();
    let dir = DataDir::new(temporary.path().to_path_buf());
    dir.create().unwrap();
    let store = Arc::new(mvcc::Store::open(&dir.store()).unwrap());
    let membership = Membership {
        cluster_id: 1,
        local_id: id,
        members: VOTERS
            .iter()
            .map(|&id| ClusterMember {
                id,
                name: format!("m{id}"),
                peer_urls: vec![format!("http://127.0.0.1:{}", 1000 + id)],
                is_learner: false,
                client_urls: Vec::new(),
            })
            .collect(),
        removed: Vec::new(),
    };
    bootstrap(&dir, &membership, |index| {
        store.apply(index, &[mvcc::WriteRequest::Membership(membership.encode())])?;
        Ok(())
    })
    .unwrap();
    let (log, owner) = DurableLog::open(&dir, &store, |_| Ok(membership.conf_state())).unwrap();
    assert_eq!(owner.member_id, id);
    let marker = Arc::new(SnapshotMarker::new(dir.snapshot_marker(), log.snapshot_index));
    let status = Arc::new(RaftStatus::default());
    let waiters = Arc::new(Waiters::default());
    let (input, inputs) = sync_channel(NODE_INPUT_CAPACITY);
    let (apply, applies) = sync_channel(APPLY_QUEUE_CAPACITY);
    network.inputs.lock().insert(id, input.clone());
    let source = Arc::new(SnapshotSource {
        store: store.clone(),
        dir: dir.clone(),
    });
    // Unused here (the network is channels), but the apply stage keeps it
    // in step with the membership.
    let peers = PeerSet::new(id, input.clone(), &tokio::runtime::Handle::current(), &source);
    let parts = NodeParts {
        config: NodeConfig {
            id,
            tick_interval: TICK,
            election_ticks: 10,
            snapshot_count: 100_000,
            catch_up_entries: SNAPSHOT_CATCH_UP_ENTRIES_DEFAULT,
            leader_wait: TICK * 20,
        },
        log,
        store: store.clone(),
        status: status.clone(),
        marker: marker.clone(),
        outbox: Box::new(ChannelOutbox {
            from: id,
            network: network.clone(),
        }),
        apply,
    };
    let node = Node::new(parts, &crate::raft::logger::logger()).unwrap();
    let ttl = Duration::from_secs(crate::auth::tokens::TOKEN_TTL_DEFAULT_SECONDS);
    let auth = Arc::new(Auth::new(AuthState::default(), ttl, crate::auth::BCRYPT_COST_DEFAULT));
    let stage = Stage {
        member_id: id,
        dir: dir.clone(),
        store: store.clone(),
        status: status.clone(),
        waiters: waiters.clone(),
        lessor: Arc::new(Lessor::default()),
        watch_hub: Arc::new(WatchHub::default()),
        marker,
        membership: Arc::new(SharedMembership::new(membership)),
        peers,
        auth: auth.clone(),
        stop: Arc::new(tokio::sync::Notify::new()),
        node: input.clone(),
        compaction_sleep: crate::apply::stage::COMPACTION_SLEEP_INTERVAL_DEFAULT,
    };
    let stage = std::thread::spawn(move || stage.run(applies));
    std::thread::spawn(move || node.run(inputs));
    TestMember {
        id,
        stage: Some(stage),
        _dir: temporary,
        input,
        status,
        waiters,
        store,
        auth,
    }
}

impl Drop for TestMember {
    /// Stops the raft loop, then waits for the apply stage to end, before
    /// the data directory is removed.
    fn drop(&mut self) {
        let (done, _stopped) = tokio::sync::oneshot::channel();
        if self.input.send(NodeInput::Stop(done)).is_ok() {
            if let Some(stage) = self.stage.take() {
                stage.join().expect("the apply stage ended cleanly");
            }
        }
    }
}

/// Proposes `request` made by `caller` through `member`'s loop, as
/// `Member::propose_as` does; the store's answer, or why it failed.
async fn propose(
    member: &TestMember,
    request: raft_request::Request,
    caller: &Caller,
) -> Result<mvcc::WriteResponse, RequestError> {
    let (sequence, answer) = member.waiters.register();
    let data = RaftRequest {
        auth_revision: caller.revision,
        user: caller.user.clone(),
        member: member.id,
        sequence,
        request: Some(request),
    }
    .encode_to_vec();
    member.input.try_send(NodeInput::Propose { sequence, data }).unwrap();
    let applied = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("answered in time")
        .unwrap()?;
    Ok(applied.response?)
}

/// Puts `key` through `member`'s loop as `caller`; the revision it
/// applied at, or why it failed.
async fn put_as(member: &TestMember, key: &str, caller: &Caller) -> Result<i64, RequestError> {
    let request = raft_request::Request::Put(pb::PutRequest {
        key: key.as_bytes().to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    });
    match propose(member, request, caller).await? {
        mvcc::WriteResponse::Put(put) => Ok(put.revision),
        other => panic!("a put answered {other:?}"),
    }
}

/// Puts `key` with auth off.
async fn put(member: &TestMember, key: &str) -> Result<i64, RequestError> {
    put_as(member, key, &Caller::default()).await
}

/// A linearizable read's wait on `member`.
async fn read_index(member: &TestMember) -> Result<(), RequestError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    member.input.try_send(NodeInput::ReadIndex { reply }).unwrap();
    tokio::time::timeout(WITHIN, answer)
        .await
        .expect("answered in time")
        .unwrap()
}

/// Waits until `condition` holds, at most [`WITHIN`].
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {WITHIN:?}");
        tokio::time::sleep(TICK).await;
    }
}

/// The leader the given members agree on, once they do.
async fn agreed_leader(members: &[&TestMember]) -> u64 {
    eventually("the members agree on a leader", || {
        let leader = members[0].status.leader();
        leader != 0 && members.iter().all(|m| m.status.leader() == leader)
    })
    .await;
    members[0].status.leader()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_over_channels() {
    let network = Network::default();
    // One member of three alone cannot elect a leader.
    let first = start(VOTERS[0], &network);
    assert!(
        matches!(put(&first, "early").await, Err(RequestError::NoLeader)),
        "a proposal before any election is refused"
    );
    let mut members = vec![first];
    members.extend(VOTERS[1..].iter().map(|&id| start(id, &network)));
    let by_id = |id: u64| members.iter().find(|m| m.id == id).unwrap();

    let leader = agreed_leader(&members.iter().collect::<Vec<_>>()).await;
    let mut last = 0;
    for i in 0..20 {
        last = put(by_id(leader), &format!("k{i}")).await.unwrap();
    }
    let follower = members.iter().find(|m| m.id != leader).unwrap();
    last = last.max(put(follower, "through-a-follower").await.unwrap());
    read_index(follower).await.unwrap();
    assert!(
        follower.store.current_revision() >= last,
        "a read after ReadIndex sees every acknowledged write"
    );
    eventually("every member applied every write", || {
        members.iter().all(|m| m.store.current_revision() == last)
    })
    .await;

    network.cut_off.lock().insert(leader);
    let others: Vec<&TestMember> = members.iter().filter(|m| m.id != leader).collect();
    eventually("the others elect a new leader", || {
        let new = others[0].status.leader();
        new != 0 && new != leader && others.iter().all(|m| m.status.leader() == new)
    })
    .await;
    let new_leader = by_id(others[0].status.leader());
    let after_change = put(new_leader, "after-the-change").await.unwrap();
    assert!(after_change > last);

    network.cut_off.lock().clear();
    eventually("the old leader catches up", || {
        by_id(leader).store.current_revision() == after_change && by_id(leader).status.leader() == new_leader.id
    })
    .await;
    network.inputs.lock().clear();
}

/// Proposes an auth change as `user` through `member`.
async fn change_auth(member: &TestMember, change: auth_request::Request, user: &str) -> Result<(), RequestError> {
    let request = raft_request::Request::Auth(AuthRequest { request: Some(change) });
    let caller = Caller {
        user: user.into(),
        revision: 0,
    };
    propose(member, request, &caller).await.map(drop)
}

// Goal: a write whose permissions were checked at an auth revision that
// an auth change has since passed is refused at apply with etcd's "revision
// of auth store is old"; checked at the current revision it applies; and
// every member holds the same auth state. Auth management needs root once
// auth is on.
// Method: the three members over channels; auth changes and puts made
// with the caller and revision the API would send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_checked_before_an_auth_change_is_refused() {
    use auth_request::Request as Change;
    let network = Network::default();
    let members: Vec<TestMember> = VOTERS.iter().map(|&id| start(id, &network)).collect();
    let leader = agreed_leader(&members.iter().collect::<Vec<_>>()).await;
    let leader = members.iter().find(|m| m.id == leader).unwrap();
    let add_root = pb::AuthUserAddRequest {
        name: "root".into(),
        hashed_password: "not a real hash".into(),
        ..Default::default()
    };
    change_auth(leader, Change::UserAdd(add_root), "").await.unwrap();
    let grant = pb::AuthUserGrantRoleRequest {
        user: "root".into(),
        role: "root".into(),
    };
    change_auth(leader, Change::UserGrantRole(grant), "").await.unwrap();
    change_auth(leader, Change::Enable(Default::default()), "")
        .await
        .unwrap();
    let checked = leader.auth.state().revision;
    let root = Caller {
        user: "root".into(),
        revision: checked,
    };
    put_as(leader, "before", &root).await.unwrap();
    let role = Change::RoleAdd(pb::AuthRoleAddRequest { name: "r".into() });
    let refused = change_auth(leader, role.clone(), "nobody").await.unwrap_err();
    assert!(matches!(refused, RequestError::UserNotFound), "{refused}");
    change_auth(leader, role, "root").await.unwrap();
    let stale = put_as(leader, "stale", &root).await.unwrap_err();
    assert!(matches!(stale, RequestError::AuthOldRevision), "{stale}");
    let current = Caller {
        revision: leader.auth.state().revision,
        ..root
    };
    assert!(current.revision > checked);
    put_as(leader, "after", &current).await.unwrap();
    eventually("every member holds the same auth state", || {
        members.iter().all(|m| *m.auth.state() == *leader.auth.state())
    })
    .await;
    network.inputs.lock().clear();
}
