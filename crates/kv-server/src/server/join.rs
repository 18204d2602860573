//! Joining a running cluster. A member started with
//! `--initial-cluster-state existing` and no data asks the members that
//! `--initial-cluster` lists for the membership (`Peer.Members`), and finds
//! itself in it by its `--initial-advertise-peer-urls`: the member that
//! `etcdctl member add` added. Its raft log then starts empty, and the
//! leader sends it a snapshot, which brings the store and the membership.
//!
//! A member restarted before that first snapshot arrived asks again,
//! knowing its id from its WAL.

use std::time::Duration;

use crate::config::{self, Config};
use crate::error::Error;
use crate::membership::{initial_members, Membership};
use crate::peer::channels::endpoint;
use crate::proto::kvserverpb::peer_client::PeerClient;
use crate::proto::kvserverpb::{MembersRequest, MembershipRecord};

/// How long a joining member keeps asking for the membership before it
/// gives up: long enough for the cluster to elect a leader after the
/// `member add` (a few election timeouts), short enough that a wrong
/// `--initial-cluster` fails the start visibly.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause between rounds of asking every listed member.
const JOIN_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// How long one member may take to answer.
const MEMBERS_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// How a member joining a running cluster learns its membership:
/// production asks the members over gRPC ([`fetch_membership`]); the
/// simulator reads a running member's.
pub type Join = dyn Fn(&Config, Option<u64>) -> Result<Membership, Error>;

/// The running cluster's membership, seen from this member: the one with
/// id `known_id`, or else the one whose peer URLs are this member's.
pub fn fetch_membership(config: &Config, known_id: Option<u64>) -> Result<Membership, Error> {
    let own_urls = config::urls(&config.initial_advertise_peer_urls);
    let peer_urls: Vec<String> = initial_members(&config.initial_cluster)?
        .into_iter()
        .flat_map(|(_, urls)| urls)
        .filter(|url| !own_urls.contains(url))
        .collect();
    if peer_urls.is_empty() {
        return Err(Error::Join("--initial-cluster names no other member to ask".into()));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Spawn {
            what: "the join runtime",
            source,
        })?;
    runtime.block_on(ask_until_answered(&peer_urls, |record| {
        membership_from(config, record, known_id)
    }))
}

/// The membership `record` a running member gave, seen from this member:
/// the one with id `known_id`, or else the one whose peer URLs are this
/// member's. A `Join` error when the record does not list this member
/// (the member that gave it is behind: ask again); `Removed` when it
/// lists it as removed.
pub fn membership_from(config: &Config, record: MembershipRecord, known_id: Option<u64>) -> Result<Membership, Error> {
    let own_urls = config::urls(&config.initial_advertise_peer_urls);
    let membership = Membership::from_record(record, 0);
    let local_id = match known_id {
        Some(id) if membership.removed.contains(&id) => return Err(Error::Removed),
        // A member behind the one that added this member.
        Some(id) if membership.get(id).is_none() => {
            return Err(Error::Join(format!("the member asked does not list member {id:x} yet")))
        }
        Some(id) => id,
        None => membership.with_peer_url(&own_urls).map(|m| m.id).ok_or_else(|| {
            Error::Join(format!(
                "no member of the cluster has the peer URLs {own_urls:?}; add this member with \
                     `etcdctl member add` first"
            ))
        })?,
    };
    Ok(Membership { local_id, ..membership })
}

/// Asks the members at `urls` in turn until one's answer is `accept`ed: a
/// member that does not answer, or whose membership does not list this
/// one yet (it is behind), is asked again after the others.
async fn ask_until_answered(
    urls: &[String],
    accept: impl Fn(MembershipRecord) -> Result<Membership, Error>,
) -> Result<Membership, Error> {
    let deadline = tokio::time::Instant::now() + JOIN_TIMEOUT;
    loop {
        let mut failures = Vec::new();
        for url in urls {
            let answer = ask(url).await.map_err(Error::Join).and_then(&accept);
            match answer {
                Ok(membership) => return Ok(membership),
                Err(Error::Join(error)) => failures.push(format!("{url}: {error}")),
                Err(other) => return Err(other),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Join(failures.join("; ")));
        }
        tokio::time::sleep(JOIN_RETRY_PAUSE).await;
    }
}

async fn ask(url: &str) -> Result<MembershipRecord, String> {
    let channel = endpoint(url)
        .map_err(|e| e.to_string())?
        .timeout(MEMBERS_CALL_TIMEOUT)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let answer = PeerClient::new(channel).members(MembersRequest {}).await;
    answer.map(|r| r.into_inner()).map_err(|s| s.message().to_string())
}
