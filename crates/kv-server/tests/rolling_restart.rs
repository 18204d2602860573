//! Goal: a rolling restart under load, as an operator upgrades a
//! cluster (SIGTERM one member, start it again, wait until healthy, go on
//! to the next), loses no acknowledged write, and clients see nothing but
//! retryable errors (gRPC Unavailable), because a stopping member drains
//! its clients and hands leadership over first (`server::serve`).
//!
//! Method: three members on loopback, real processes. Writers put unique
//! keys through all three members, moving to the next member on an error;
//! every error's code is checked. Each member in turn gets SIGTERM, must
//! exit within a bound, and is started again. Then every acknowledged key
//! is read back. The same test runs against real etcd v3.5.17, and the
//! puts' p99 and longest time during the restarts are printed for both
//! (`docs/benchmarks.md` records them).
//!
//! Needs etcd: `ETCD_BIN`, or the cache `tools/etcd-peers/build.sh` fills.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use tonic::transport::{Channel, Endpoint};

/// Concurrent writers: enough to keep puts in flight on every member.
const WRITERS: usize = 16;
/// Tries of one put over the members before the test gives up on it.
const TRIES_MAX: usize = 100;
/// Pause between tries of a put refused as unavailable.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a member may take to stop after SIGTERM: the client drain's
/// bound (7 s), the leadership transfer's (7 s), and some.
const STOP_WITHIN: Duration = Duration::from_secs(20);
/// Load before and after each restart, so each is measured under load.
const SETTLE: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Tally {
    acknowledged: Vec<String>,
    /// Each put's time from first try to acknowledgement, retries included.
    latencies_us: Vec<u64>,
    /// Tries refused as unavailable, or cut by a closed connection.
    retryable: usize,
    /// Every other error, by code and message: none may happen.
    other: Vec<String>,
}

async fn writer(id: usize, channels: Vec<Channel>, running: Arc<AtomicBool>, tally: Arc<Mutex<Tally>>) {
    let mut member = id % channels.len();
    let mut n = 0;
    while running.load(Ordering::Relaxed) {
        let key = format!("roll/{id:02}/{n:06}");
        let started = Instant::now();
        let mut acknowledged = false;
        for _ in 0..TRIES_MAX {
            let mut kv = KvClient::new(channels[member].clone());
            let put = pb::PutRequest {
                key: key.clone().into_bytes(),
                value: b"v".to_vec(),
                ..Default::default()
            };
            match kv.put(put).await {
                Ok(_) => {
                    acknowledged = true;
                    break;
                }
                Err(status) => {
                    {
                        let mut tally = tally.lock().unwrap();
                        // A status the member sent must be Unavailable. One
                        // with a source is this client's own transport
                        // failing (a connection closed or refused), which
                        // grpc-go reports as Unavailable too.
                        if status.code() == tonic::Code::Unavailable || std::error::Error::source(&status).is_some() {
                            tally.retryable += 1;
                        } else {
                            tally.other.push(format!("{:?}: {}", status.code(), status.message()));
                        }
                    }
                    member = (member + 1) % channels.len();
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
        assert!(acknowledged, "{key} was never acknowledged in {TRIES_MAX} tries");
        let mut tally = tally.lock().unwrap();
        tally.acknowledged.push(key);
        tally.latencies_us.push(started.elapsed().as_micros() as u64);
        n += 1;
    }
}

fn terminate(cluster: &mut common::Cluster, i: usize) {
    let child = cluster.members[i].child.as_mut().expect("running");
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let deadline = Instant::now() + STOP_WITHIN;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            // etcd re-raises the signal (dies by SIGTERM); kv-server exits 0.
            use std::os::unix::process::ExitStatusExt;
            assert!(
                status.success() || status.signal() == Some(15),
                "member {i} ended with {status}"
            );
            cluster.members[i].child = None;
            return;
        }
        assert!(
            Instant::now() < deadline,
            "member {i} did not stop within {STOP_WITHIN:?} of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rolls `binary`'s cluster under load; returns (puts, p99 ms, max ms).
async fn roll(binary: &Path, base: u16) -> (usize, f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::start(binary, dir.path(), base, &[]);
    let channels: Vec<Channel> = cluster
        .members
        .iter()
        .map(|member| {
            Endpoint::from_shared(format!("http://{}", member.endpoint()))
                .expect("endpoint")
                .connect_timeout(common::CONNECT_TIMEOUT)
                .timeout(CALL_TIMEOUT)
                .connect_lazy()
        })
        .collect();
    let running = Arc::new(AtomicBool::new(true));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| tokio::spawn(writer(id, channels.clone(), running.clone(), tally.clone())))
        .collect();
    tokio::time::sleep(SETTLE).await;
    for i in 0..cluster.members.len() {
        let cluster_ref = &mut cluster;
        tokio::task::block_in_place(|| {
            terminate(cluster_ref, i);
            cluster_ref.spawn(i);
            cluster_ref.wait_healthy(&[i]);
        });
        tokio::time::sleep(SETTLE).await;
    }
    running.store(false, Ordering::Relaxed);
    for writer in writers {
        writer.await.expect("writer");
    }
    let tally = std::mem::take(&mut *tally.lock().unwrap());
    assert!(
        tally.other.is_empty(),
        "errors other than Unavailable: {:?}",
        tally.other
    );

    // Every acknowledged key is there.
    let stored = common::range(&cluster.members[0].endpoint(), b"roll/", b"roll0", CALL_TIMEOUT).await;
    let stored: std::collections::HashSet<Vec<u8>> = stored.into_iter().map(|kv| kv.key).collect();
    let lost: Vec<&String> = tally
        .acknowledged
        .iter()
        .filter(|key| !stored.contains(key.as_bytes()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged puts lost, first {:?}",
        lost.len(),
        lost.first()
    );
    let mut latencies = tally.latencies_us;
    latencies.sort_unstable();
    let p99 = latencies[latencies.len() * 99 / 100] as f64 / 1000.0;
    let max = *latencies.last().expect("puts") as f64 / 1000.0;
    println!(
        "{}: {} puts acknowledged, all read back; {} tries retried (Unavailable or connection closed); p99 {p99:.1} ms, longest {max:.1} ms",
        binary.display(),
        latencies.len(),
        tally.retryable
    );
    (latencies.len(), p99, max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_loses_nothing() {
    let kv = roll(&common::kv_server(), 26_800).await;
    let etcd = roll(&common::etcd_tool("ETCD_BIN", "etcd"), 26_900).await;
    assert!(kv.0 > 0 && etcd.0 > 0);
    println!(
        "rolling restart put p99: kv-server {:.1} ms, etcd 3.5.17 {:.1} ms",
        kv.1, etcd.1
    );
    println!(
        "rolling restart longest put: kv-server {:.1} ms, etcd 3.5.17 {:.1} ms",
        kv.2, etcd.2
    );
}
