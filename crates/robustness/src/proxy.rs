//! A TCP proxy of our own on loopback in front of every member's peer
//! port, so network faults can be made without root: each member's peer
//! URL (what the others dial) is the proxy's port, and the proxy forwards
//! to the member's real peer listener.
//!
//! The proxy knows which member a connection comes from by finding the
//! socket's owner in `/proc` (all members connect from 127.0.0.1, so the
//! address alone cannot tell). That lets it cut a member off both ways:
//!
//! - partition: connections to or from a cut-off member are closed and new
//!   ones refused, until healed;
//! - latency: every chunk waits this long before it is forwarded;
//! - drops: every connection is broken this often, losing whatever raft
//!   messages were in flight (raft resends, as on any lossy network).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bytes read per chunk: large enough for a batch of raft appends.
const CHUNK_BYTES: usize = 64 << 10;

/// The faults the proxies apply, shared by all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkFaults {
    /// Members cut off from the others.
    pub partitioned: HashSet<usize>,
    /// Added to every chunk forwarded.
    pub latency: Duration,
    /// Connections are broken after this long open.
    pub drop_every: Option<Duration>,
}

/// Every member's proxy, and what they share.
pub struct Network {
    faults: watch::Sender<NetworkFaults>,
    /// Each member's process id, to find who a connection comes from.
    pids: Arc<Mutex<Vec<Option<u32>>>>,
}

impl Network {
    /// Starts one proxy per `(listen, target)` port pair, member `i` being
    /// the `i`th, on the current runtime.
    pub async fn start(ports: &[(u16, u16)]) -> std::io::Result<Network> {
        let (faults, _) = watch::channel(NetworkFaults::default());
        let pids = Arc::new(Mutex::new(vec![None; ports.len()]));
        for (member, &(listen, target)) in ports.iter().enumerate() {
            let listener = TcpListener::bind(("127.0.0.1", listen)).await?;
            let faults = faults.subscribe();
            let pids = pids.clone();
            tokio::spawn(accept_loop(listener, member, target, faults, pids));
        }
        Ok(Network { faults, pids })
    }

    pub fn set_pid(&self, member: usize, pid: Option<u32>) {
        self.pids.lock()[member] = pid;
    }

    pub fn set(&self, faults: NetworkFaults) {
        self.faults.send_replace(faults);
    }

    pub fn heal(&self) {
        self.set(NetworkFaults::default());
    }
}

async fn accept_loop(
    listener: TcpListener,
    member: usize,
    target: u16,
    faults: watch::Receiver<NetworkFaults>,
    pids: Arc<Mutex<Vec<Option<u32>>>>,
) {
    loop {
        let Ok((inbound, from)) = listener.accept().await else {
            continue;
        };
        let local = listener.local_addr().ok();
        let source = local.and_then(|local| socket_owner(from, local, &pids.lock()));
        tokio::spawn(forward(inbound, source, member, target, faults.clone()));
    }
}

fn cut(faults: &NetworkFaults, source: Option<usize>, member: usize) -> bool {
    faults.partitioned.contains(&member) || source.is_some_and(|s| faults.partitioned.contains(&s))
}

/// Forwards one connection both ways until either side closes or a fault
/// says to break it.
async fn forward(
    inbound: TcpStream,
    source: Option<usize>,
    member: usize,
    target: u16,
    mut faults: watch::Receiver<NetworkFaults>,
) {
    let now = faults.borrow().clone();
    if cut(&now, source, member) {
        return;
    }
    let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let latency = Arc::new(Mutex::new(now.latency));
    let broken_after = now.drop_every.unwrap_or(Duration::MAX);
    let pumps = async {
        tokio::join!(
            pump(in_read, out_write, latency.clone()),
            pump(out_read, in_write, latency.clone())
        )
    };
    let watch_faults = async {
        while faults.changed().await.is_ok() {
            let now = faults.borrow().clone();
            if cut(&now, source, member) {
                return;
            }
            *latency.lock() = now.latency;
        }
    };
    tokio::select! {
        _ = pumps => {}
        _ = watch_faults => {}
        _ = tokio::time::sleep(broken_after) => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    latency: Arc<Mutex<Duration>>,
) {
    let mut buffer = vec![0u8; CHUNK_BYTES];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let delay = *latency.lock();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// Which member owns the client socket at `peer` connected to `local`:
/// the socket's inode from `/proc/net/tcp`, then the member process with
/// a descriptor on it.
fn socket_owner(peer: SocketAddr, local: SocketAddr, pids: &[Option<u32>]) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let want_local = format!(":{:04X}", peer.port());
    let want_remote = format!(":{:04X}", local.port());
    let inode = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let matches = fields.get(1)?.ends_with(&want_local) && fields.get(2)?.ends_with(&want_remote);
        matches.then(|| fields.get(9).map(|s| s.to_string())).flatten()
    })?;
    let link = format!("socket:[{inode}]");
    pids.iter().enumerate().find_map(|(member, pid)| {
        let descriptors = std::fs::read_dir(format!("/proc/{}/fd", (*pid)?)).ok()?;
        descriptors
            .filter_map(|entry| entry.ok())
            .any(|entry| std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy() == link))
            .then_some(member)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a connection through the proxy is attributed to the process
    // that opened it, and a partition of that process closes it.
    // Method: this test process connects through member 0's real proxy on
    // loopback to a real echo listener, registered as member 1.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_are_attributed_and_cut() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_port = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 64];
                    while let Ok(read) = socket.read(&mut buffer).await {
                        if read == 0 || socket.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let free_port = || {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let (proxy_port, other_port) = (free_port(), free_port());
        let network = Network::start(&[(proxy_port, echo_port), (other_port, echo_port)])
            .await
            .unwrap();
        // This process plays member 1, connecting to member 0's proxy.
        network.set_pid(1, Some(std::process::id()));

        let mut client = TcpStream::connect(("127.0.0.1", proxy_port)).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut reply = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut reply))
            .await
            .expect("echoed in time")
            .unwrap();
        assert_eq!(&reply, b"ping");

        // Cutting member 1 off closes the connection only if the proxy
        // knows member 1 opened it.
        network.set(NetworkFaults {
            partitioned: [1].into(),
            ..NetworkFaults::default()
        });
        let mut buffer = [0u8; 4];
        let closed = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buffer)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "the partition closed the connection"
        );
    }
}
