//! The cluster's members and their ids, derived as etcd derives them so the
//! same flags give the same ids on every member:
//!
//! - member id: the first 8 bytes (big-endian) of SHA-1 over the member's
//!   sorted peer URLs concatenated, followed by the cluster token;
//! - cluster id: the first 8 bytes of SHA-1 over the sorted member ids,
//!   each as 8 big-endian bytes.
//!
//! Raft uses the member ids as its node ids.

use sha1::{Digest, Sha1};

use crate::config::{self, Config};
use crate::error::Error;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Membership {
    pub cluster_id: u64,
    pub local_id: u64,
    pub members: Vec<Member>,
}

fn first_eight(digest: &[u8]) -> u64 {
    u64::from_be_bytes(digest[..8].try_into().expect("SHA-1 has 20 bytes"))
}

pub fn member_id(peer_urls: &[String], token: &str) -> u64 {
    let mut sorted = peer_urls.to_vec();
    sorted.sort();
    let mut hasher = Sha1::new();
    hasher.update(sorted.concat().as_bytes());
    hasher.update(token.as_bytes());
    first_eight(&hasher.finalize())
}

impl Membership {
    /// Reads `--initial-cluster` and finds this member by `--name`.
    pub fn from_config(config: &Config) -> Result<Membership, Error> {
        let refused = |reason: String| Error::Flag {
            flag: "initial-cluster",
            reason,
        };
        let mut by_name: Vec<(String, Vec<String>)> = Vec::new();
        for pair in config::urls(&config.initial_cluster) {
            let (name, url) = pair
                .split_once('=')
                .ok_or_else(|| refused(format!("{pair:?} is not name=url")))?;
            match by_name.iter_mut().find(|(n, _)| n == name) {
                Some((_, urls)) => urls.push(url.to_string()),
                None => by_name.push((name.to_string(), vec![url.to_string()])),
            }
        }
        let members: Vec<Member> = by_name
            .into_iter()
            .map(|(name, peer_urls)| Member {
                id: member_id(&peer_urls, &config.initial_cluster_token),
                name,
                peer_urls,
            })
            .collect();
        let local = members
            .iter()
            .find(|m| m.name == config.name)
            .ok_or_else(|| refused(format!("no member is named {:?}", config.name)))?;
        let mut ids: Vec<u64> = members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        let mut hasher = Sha1::new();
        for id in &ids {
            hasher.update(id.to_be_bytes());
        }
        Ok(Membership {
            cluster_id: first_eight(&hasher.finalize()),
            local_id: local.id,
            members,
        })
    }

    pub fn peers(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(move |m| m.id != self.local_id)
    }

    pub fn voter_ids(&self) -> Vec<u64> {
        self.members.iter().map(|m| m.id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    // Goal: ids are deterministic, distinct per member, and the same cluster
    // id comes out whichever member computes it.
    #[test]
    fn ids_agree_across_members() {
        let cluster = "a=http://127.0.0.1:2380,b=http://127.0.0.1:22380,c=http://127.0.0.1:32380";
        let membership = |name: &str| {
            let config = Config::parse_from(["kv-server", "--name", name, "--initial-cluster", cluster]);
            Membership::from_config(&config).unwrap()
        };
        let (a, b) = (membership("a"), membership("b"));
        assert_eq!(a.cluster_id, b.cluster_id);
        assert_ne!(a.local_id, b.local_id);
        assert_eq!(a.peers().count(), 2);
        assert_eq!(a.members, b.members);
        assert!(Membership::from_config(&Config::parse_from([
            "kv-server",
            "--name",
            "zz",
            "--initial-cluster",
            cluster
        ]))
        .is_err());
    }
}
