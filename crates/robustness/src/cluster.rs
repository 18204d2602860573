//! A 3-member cluster of real processes on loopback (kv-server, or real
//! etcd as the control), started by the project's one launcher
//! (`crates/cluster`), each member's peer traffic through the proxy
//! (`proxy.rs`). Members are killed, paused and restarted here, and the
//! proxy is told which process each member is.
//!
//! Ports, from the base port `B`, for member `i`: clients `B + 10i`, the
//! real peer listener `B + 10i + 1`, the proxy (the peer URL the others
//! dial) `B + 10i + 2`.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::proxy::Network;

/// Members of the cluster.
pub const MEMBERS: usize = 3;
/// Entries between snapshots: small, so that rounds take snapshots and a
/// member that was away catches up by one.
pub const SNAPSHOT_COUNT: &str = "1000";
/// Where the proxy listens for member `i`: this far above its client port.
const PROXY_OFFSET: u16 = 2;

pub struct Cluster {
    launcher: ::cluster::Cluster,
    pub dir: PathBuf,
    pub network: Network,
}

/// The launcher's members, ports and endpoints, read through.
impl Deref for Cluster {
    type Target = ::cluster::Cluster;
    fn deref(&self) -> &::cluster::Cluster {
        &self.launcher
    }
}

impl Cluster {
    /// Starts the proxies and the members, with `env` at every start
    /// (failpoints), and waits until all are healthy.
    pub async fn start(binary: &Path, dir: &Path, base: u16, env: Vec<(String, String)>) -> std::io::Result<Cluster> {
        let layout = ::cluster::Layout::Stride {
            base,
            advertise_offset: PROXY_OFFSET,
        };
        let mut spec = ::cluster::Spec::new(binary, dir, MEMBERS, layout, "robustness");
        spec.flags = vec!["--snapshot-count".into(), SNAPSHOT_COUNT.into()];
        spec.env = env;
        let launcher = ::cluster::Cluster::new(spec);
        let ports: Vec<(u16, u16)> = launcher
            .members
            .iter()
            .map(|m| (m.advertised_peer_port, m.peer_port))
            .collect();
        let network = Network::start(&ports).await?;
        let mut cluster = Cluster {
            launcher,
            dir: dir.to_path_buf(),
            network,
        };
        for i in 0..MEMBERS {
            cluster.spawn(i, &[])?;
        }
        for i in 0..MEMBERS {
            cluster.wait_healthy(i).await?;
        }
        Ok(cluster)
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.launcher.members.iter().map(::cluster::Member::endpoint).collect()
    }

    /// Starts member `i`'s process, with `extra` environment on top of the
    /// cluster's.
    pub fn spawn(&mut self, i: usize, extra: &[(String, String)]) -> std::io::Result<()> {
        self.launcher.spawn_with(i, extra)?;
        self.network.set_pid(i, self.launcher.members[i].pid());
        Ok(())
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(&mut self, i: usize) {
        self.launcher.kill(i);
        self.network.set_pid(i, None);
    }

    /// How member `i`'s process ended, if it has.
    pub fn exited(&mut self, i: usize) -> Option<ExitStatus> {
        self.launcher.exit_status(i)
    }

    /// Waits, at most `within`, for member `i`'s process to end.
    pub async fn wait_exit(&mut self, i: usize, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.exited(i) {
                self.launcher.members[i].child = None;
                self.network.set_pid(i, None);
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Waits until member `i` is healthy, at most the launcher's bound;
    /// the launcher's blocking wait runs off the runtime's workers.
    pub async fn wait_healthy(&self, i: usize) -> std::io::Result<()> {
        let probe = self.launcher.spec.probe();
        let port = self.launcher.members[i].client_port;
        let name = self.launcher.members[i].name.clone();
        let deadline = Instant::now() + ::cluster::launch::HEALTHY_WITHIN;
        loop {
            let probe = probe.clone();
            if tokio::task::spawn_blocking(move || probe.healthy(port))
                .await
                .unwrap_or(false)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(std::io::Error::other(format!(
                    "{name} not healthy within {:?}; logs in {}",
                    ::cluster::launch::HEALTHY_WITHIN,
                    self.dir.display()
                )));
            }
            tokio::time::sleep(::cluster::launch::POLL).await;
        }
    }

    pub fn stop(&mut self) {
        self.launcher.stop();
        for i in 0..MEMBERS {
            self.network.set_pid(i, None);
        }
    }
}
