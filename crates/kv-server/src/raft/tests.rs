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
//! example runs them, each wired as the server wires a member
//! (`server::wiring`), from flags, with its own temporary data directory
//! and its loop and apply stage on threads of their own; their outboxes
//! deliver raft messages into each other's input queues through a
//! `Network` that can cut a member off. Ticks are 10 ms, so an election takes a fraction
//! of a second. Every wait is bounded.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use raft::prelude::Message;

use crate::auth::Caller;
use crate::clock::RealClock;
use crate::error::RequestError;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::{auth_request, raft_request, AuthRequest};
use crate::raft::inbox::NodeSender;
use crate::raft::input::{NodeInput, Outbox};
use crate::server::wiring::{self, Threads, World};

/// Bounds every wait: an election or a commit takes well under a second
/// at 10 ms ticks, even on a loaded machine.
const WITHIN: Duration = Duration::from_secs(10);
const TICK: Duration = Duration::from_millis(10);
/// Members of the test cluster.
const VOTERS: usize = 3;

/// Delivers raft messages between members' input queues; a member cut
/// off neither sends nor receives.
#[derive(Clone, Default)]
struct Network {
    inputs: Arc<Mutex<HashMap<u64, NodeSender>>>,
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
    member: Arc<Member>,
    /// The raft loop's input, where the network delivers.
    input: NodeSender,
    /// The member's threads, joined on drop, so that no store of a
    /// finished test writes into its removed directory.
    threads: Option<Threads>,
    /// Whether the test expects this member to stop on a fault.
    faults: bool,
    _dir: tempfile::TempDir,
}

/// Member `index` (0-based) of the test cluster, as the server wires
/// one (`server::wiring`), its raft messages going over `network`.
fn start(index: usize, network: &Network) -> TestMember {
    start_on(index, network, Arc::new(wal::RealDisk))
}

/// [`start`], with the member's WAL writing and syncing through `disk`.
fn start_on(index: usize, network: &Network, disk: Arc<dyn wal::Disk>) -> TestMember {
    let temporary = tempfile::tempdir().unwrap();
    let config = member_config(index, temporary.path());
    start_with(config, temporary, network, disk, None)
}

/// A member from `config`, its data in `temporary`; `election_ticks`
/// fixes raft's election timeout at exactly that many ticks.
fn start_with(
    config: crate::config::Config,
    temporary: tempfile::TempDir,
    network: &Network,
    disk: Arc<dyn wal::Disk>,
    election_ticks: Option<usize>,
) -> TestMember {
    let options = wal::Options {
        disk,
        ..wal::Options::default()
    };
    let opened = crate::server::start::open(
        &config,
        options,
        mvcc::Power::default(),
        &crate::server::join::fetch_membership,
    )
    .expect("the data directory opens");
    let id = opened.membership.local_id;
    let world = World {
        outbox: Some(Box::new(ChannelOutbox {
            from: id,
            network: network.clone(),
        })),
        clock: Arc::new(RealClock),
        election_ticks,
        entropy: Arc::new(crate::entropy::OsEntropy),
    };
    let wired = wiring::wire(&config, opened, &tokio::runtime::Handle::current(), world).unwrap();
    network.inputs.lock().insert(id, wired.node_sender.clone());
    let (member, input, threads) = wired.spawn().unwrap();
    TestMember {
        id,
        member,
        input,
        threads: Some(threads),
        faults: false,
        _dir: temporary,
    }
}

/// The real disk, whose fdatasync fails once armed, as a broken disk's
/// would: for one member's WAL, where the failpoints act on every member
/// of the process.
#[derive(Debug, Default)]
struct FailingDisk {
    armed: std::sync::atomic::AtomicBool,
}

impl wal::Disk for FailingDisk {
    fn write_all_at(&self, file: &std::fs::File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        wal::RealDisk.write_all_at(file, bytes, offset)
    }

    fn fdatasync(&self, file: &std::fs::File) -> std::io::Result<()> {
        if self.armed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(std::io::Error::other("injected fdatasync failure"));
        }
        wal::RealDisk.fdatasync(file)
    }

    fn fsync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        wal::RealDisk.fsync_dir(dir)
    }
}

/// The flags of member `index`: a 3-member cluster, 10 ms ticks, an
/// election timeout of 10 ticks.
fn member_config(index: usize, dir: &std::path::Path) -> crate::config::Config {
    let args = crate::flags::loopback::member_args(VOTERS, index, dir, TICK, TICK * 10);
    crate::flags::parse(&args, &[]).expect("the test's flags parse").config
}

impl Drop for TestMember {
    /// Stops the raft loop, then waits for both threads to end, before
    /// the data directory is removed; neither may have met a fault.
    fn drop(&mut self) {
        let (done, _stopped) = tokio::sync::oneshot::channel();
        let _ = self.input.send(NodeInput::Stop(done));
        if let Some(threads) = self.threads.take() {
            threads.join();
        }
        if !std::thread::panicking() && !self.faults {
            assert_eq!(self.member.halt().raised(), None, "member {:x} met no fault", self.id);
        }
    }
}

/// Proposes `request` made by `caller` through `member`, as the API does.
async fn propose(
    member: &TestMember,
    request: raft_request::Request,
    caller: &Caller,
) -> Result<mvcc::WriteResponse, RequestError> {
    member.member.propose_as(request, caller).await
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
    member.member.linearize().await
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
        let leader = members[0].member.leader();
        leader != 0 && members.iter().all(|m| m.member.leader() == leader)
    })
    .await;
    members[0].member.leader()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_over_channels() {
    let network = Network::default();
    // One member of three alone cannot elect a leader.
    let first = start(0, &network);
    assert!(
        matches!(put(&first, "early").await, Err(RequestError::NoLeader)),
        "a proposal before any election is refused"
    );
    let mut members = vec![first];
    members.extend((1..VOTERS).map(|index| start(index, &network)));
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
        follower.member.current_revision() >= last,
        "a read after ReadIndex sees every acknowledged write"
    );
    eventually("every member applied every write", || {
        members.iter().all(|m| m.member.current_revision() == last)
    })
    .await;

    network.cut_off.lock().insert(leader);
    let others: Vec<&TestMember> = members.iter().filter(|m| m.id != leader).collect();
    eventually("the others elect a new leader", || {
        let new = others[0].member.leader();
        new != 0 && new != leader && others.iter().all(|m| m.member.leader() == new)
    })
    .await;
    let new_leader = by_id(others[0].member.leader());
    let after_change = put(new_leader, "after-the-change").await.unwrap();
    assert!(after_change > last);

    network.cut_off.lock().clear();
    eventually("the old leader catches up", || {
        by_id(leader).member.current_revision() == after_change && by_id(leader).member.leader() == new_leader.id
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
    let members: Vec<TestMember> = (0..VOTERS).map(|index| start(index, &network)).collect();
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
    let checked = leader.member.auth_state().revision;
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
        revision: leader.member.auth_state().revision,
        ..root
    };
    assert!(current.revision > checked);
    put_as(leader, "after", &current).await.unwrap();
    eventually("every member holds the same auth state", || {
        members
            .iter()
            .all(|m| *m.member.auth_state() == *leader.member.auth_state())
    })
    .await;
    network.inputs.lock().clear();
}

/// Puts `key` through whichever of `members` takes it first, trying each
/// in turn for at most [`WITHIN`] (a leader that stopped is replaced
/// meanwhile); the revision it applied at.
async fn put_through_any(members: &[&TestMember], key: &str) -> i64 {
    let deadline = Instant::now() + WITHIN;
    loop {
        for member in members {
            if let Ok(revision) = put(member, key).await {
                return revision;
            }
        }
        assert!(Instant::now() < deadline, "no member took {key} within {WITHIN:?}");
        tokio::time::sleep(TICK).await;
    }
}

// Goal: a failed fdatasync is fatal to the member it happens on, and to
// that member alone: its raft loop ends with "WAL write failed", raised on
// its halt, in a process that holds the two others too, which go on
// electing and taking writes. Nothing the failed member acknowledged is
// lost: every write acknowledged before is read on the others after.
// Method: the three members in one process; the third's WAL syncs
// through a disk whose fdatasync fails once armed, armed after 20 writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_its_member_alone() {
    let network = Network::default();
    let disk = Arc::new(FailingDisk::default());
    let mut members: Vec<TestMember> = (0..VOTERS - 1).map(|index| start(index, &network)).collect();
    members.push(start_on(VOTERS - 1, &network, disk.clone()));
    members[VOTERS - 1].faults = true;
    agreed_leader(&members.iter().collect::<Vec<_>>()).await;
    let healthy: Vec<&TestMember> = members[..VOTERS - 1].iter().collect();
    let mut last = 0;
    for i in 0..20 {
        last = put_through_any(&healthy, &format!("before/{i}")).await;
    }
    disk.armed.store(true, std::sync::atomic::Ordering::Release);
    let failed = &members[VOTERS - 1];
    let deadline = Instant::now() + WITHIN;
    let mut i = 0;
    while failed.member.halt().raised().is_none() {
        assert!(
            Instant::now() < deadline,
            "the member with the failed fsync kept running"
        );
        last = put_through_any(&healthy, &format!("during/{i}")).await;
        i += 1;
    }
    let fault = failed.member.halt().raised().expect("raised");
    assert_eq!(fault.what(), "WAL write failed", "{fault}");
    for i in 0..20 {
        last = put_through_any(&healthy, &format!("after/{i}")).await;
    }
    for member in &healthy {
        assert_eq!(
            member.member.halt().raised(),
            None,
            "a member with a good disk met no fault"
        );
    }
    eventually("both others applied every write", || {
        healthy.iter().all(|m| m.member.current_revision() == last)
    })
    .await;
    network.inputs.lock().clear();
}

/// Goal: the election clock's advance at start (`member/tick_advance.rs`)
/// reaches raft: a single member whose election timeout is fixed at 300
/// ticks (3 s) leads within a second once advanced, and is still
/// leaderless after that second without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tick_advance_makes_a_single_member_lead_at_once() {
    const ELECTION_TICKS: usize = 300;
    let network = Network::default();
    let start = |network: &Network| {
        let temporary = tempfile::tempdir().unwrap();
        let args = crate::flags::loopback::member_args(1, 0, temporary.path(), TICK, TICK * ELECTION_TICKS as u32);
        let config = crate::flags::parse(&args, &[]).expect("the test's flags parse").config;
        start_with(
            config,
            temporary,
            network,
            Arc::new(wal::RealDisk),
            Some(ELECTION_TICKS),
        )
    };
    let advanced = start(&network);
    advanced.member.advance_election_ticks().await;
    let started = Instant::now();
    while advanced.member.leader() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "no leader a second after the advance"
        );
        tokio::time::sleep(TICK).await;
    }
    drop(advanced);
    network.inputs.lock().clear();
    let plain = start(&network);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        plain.member.leader(),
        0,
        "without the advance, a leader before the election timeout"
    );
    network.inputs.lock().clear();
}
