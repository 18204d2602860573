//! A 3-member cluster of real processes on loopback (kv-server, or real
//! etcd as the control), each member's peer traffic through the proxy
//! (`proxy.rs`). Members are killed, paused and restarted here.
//!
//! Ports, from the base port `B`, for member `i`: clients `B + 10i`, the
//! real peer listener `B + 10i + 1`, the proxy (the peer URL the others
//! dial) `B + 10i + 2`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::proxy::Network;

/// Members of the cluster.
pub const MEMBERS: usize = 3;
/// How long a member may take to report healthy after a (re)start.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(30);
/// Entries between snapshots: small, so that rounds take snapshots and a
/// member that was away catches up by one.
pub const SNAPSHOT_COUNT: &str = "1000";

pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub proxy_port: u16,
    pub child: Option<Child>,
}

impl Member {
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }
}

pub struct Cluster {
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub members: Vec<Member>,
    pub network: Network,
    /// Environment given to every member at every start (failpoints).
    pub env: Vec<(String, String)>,
}

impl Cluster {
    /// Starts the proxies and the members, and waits until all are healthy.
    pub async fn start(binary: &Path, dir: &Path, base: u16, env: Vec<(String, String)>) -> std::io::Result<Cluster> {
        let members: Vec<Member> = (0..MEMBERS as u16)
            .map(|i| Member {
                name: format!("infra{}", i + 1),
                client_port: base + 10 * i,
                peer_port: base + 10 * i + 1,
                proxy_port: base + 10 * i + 2,
                child: None,
            })
            .collect();
        let ports: Vec<(u16, u16)> = members.iter().map(|m| (m.proxy_port, m.peer_port)).collect();
        let network = Network::start(&ports).await?;
        let mut cluster = Cluster {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            members,
            network,
            env,
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
        self.members.iter().map(Member::endpoint).collect()
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.proxy_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `i`'s process, with `extra` environment on top of the
    /// cluster's.
    pub fn spawn(&mut self, i: usize, extra: &[(String, String)]) -> std::io::Result<()> {
        let initial_cluster = self.initial_cluster();
        let member = &self.members[i];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", member.name)))?;
        let child = Command::new(&self.binary)
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(self.dir.join(&member.name))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{}", member.peer_port)])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", member.proxy_port),
            ])
            .args([
                "--initial-cluster",
                &initial_cluster,
                "--initial-cluster-token",
                "robustness",
            ])
            .args(["--initial-cluster-state", "new", "--snapshot-count", SNAPSHOT_COUNT])
            .envs(self.env.iter().chain(extra).map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.network.set_pid(i, Some(child.id()));
        self.members[i].child = Some(child);
        Ok(())
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.network.set_pid(i, None);
    }

    /// SIGSTOP or SIGCONT.
    pub fn signal(&self, i: usize, signal: libc::c_int) {
        if let Some(child) = &self.members[i].child {
            // SAFETY: kill(2) with a child's pid and a valid signal number.
            unsafe {
                libc::kill(child.id() as libc::pid_t, signal);
            }
        }
    }

    /// How member `i`'s process ended, if it has.
    pub fn exited(&mut self, i: usize) -> Option<ExitStatus> {
        self.members[i]
            .child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Waits, at most `within`, for member `i`'s process to end.
    pub async fn wait_exit(&mut self, i: usize, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.exited(i) {
                self.members[i].child = None;
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    pub async fn wait_healthy(&self, i: usize) -> std::io::Result<()> {
        let deadline = Instant::now() + HEALTHY_WITHIN;
        while !healthy(self.members[i].client_port).await {
            if Instant::now() >= deadline {
                return Err(std::io::Error::other(format!(
                    "{} not healthy within {HEALTHY_WITHIN:?}; logs in {}",
                    self.members[i].name,
                    self.dir.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The data directory's WAL of member `i`.
    pub fn wal_dir(&self, i: usize) -> PathBuf {
        self.dir.join(&self.members[i].name).join("member/wal")
    }

    pub fn stop(&mut self) {
        for i in 0..self.members.len() {
            self.signal(i, libc::SIGCONT);
            self.kill(i);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// GET /health: whether the member says it is healthy.
async fn healthy(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        stream.write_all(request).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response.contains("\"health\":\"true\""))
    };
    tokio::time::timeout(Duration::from_secs(3), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
