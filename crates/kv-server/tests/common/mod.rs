//! What the integration tests share: a cluster of real processes on
//! loopback (this project's kv-server or a real etcd, started with the
//! same etcd flags by the project's one launcher, `crates/cluster`),
//! whose members can be killed with SIGKILL and restarted on their data
//! directories; etcd's tools; HTTP probes.
//!
//! Test clusters take ports below 32768, outside Linux's ephemeral range
//! (32768–60999): a port in it can be held at any moment as the source
//! port of some client's connection, and a member then fails to bind it.

#![allow(dead_code)]

pub mod certs;
pub mod gateway;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs real etcdctl against `endpoints`, each command bounded by 60 s.
/// `ETCDCTL_BIN` is not passed on: etcdctl would warn of an unknown
/// `ETCDCTL_*` variable on every run.
pub fn etcdctl(endpoints: &str, args: &[&str]) -> std::process::Output {
    Command::new(etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .env_remove("ETCDCTL_BIN")
        .args(["--endpoints", endpoints, "--command-timeout", "60s"])
        .args(args)
        .output()
        .expect("run etcdctl")
}

/// The longest one run of etcd's benchmark tool may take; a watch run
/// that misses events would otherwise wait forever.
const BENCHMARK_RUN_AT_MOST: Duration = Duration::from_secs(120);

/// Runs etcd's benchmark tool (`ETCD_BENCHMARK_BIN`) with `args`, killed
/// after [`BENCHMARK_RUN_AT_MOST`]; fails the test unless it succeeds, and
/// returns what it printed.
pub fn etcd_benchmark(args: &[&str]) -> String {
    let tool = etcd_tool("ETCD_BENCHMARK_BIN", "etcd-benchmark");
    let child = Command::new(tool)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run benchmark");
    // Output is drained by wait_with_output in a thread; the deadline is
    // kept here.
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output();
        let _ = done.send(());
        output
    });
    if finished.recv_timeout(BENCHMARK_RUN_AT_MOST).is_err() {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        panic!("benchmark {args:?} ran over {BENCHMARK_RUN_AT_MOST:?}");
    }
    let output = waiter.join().expect("waiter").expect("benchmark output");
    let report = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "benchmark {args:?} failed:\n{report}");
    report
}

/// etcdctl with `flags` (TLS, `--user`) before `args`: whether it
/// succeeded, and what it printed.
pub fn etcdctl_as(endpoint: &str, flags: &[String], args: &[&str]) -> (bool, String) {
    let mut all: Vec<&str> = flags.iter().map(String::as_str).collect();
    all.extend_from_slice(args);
    let output = etcdctl(endpoint, &all);
    (output.status.success(), text(&output))
}

/// What a command printed: its stdout, then its stderr.
pub fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs etcdctl until it succeeds, retrying every 500 ms while what it
/// says contains `retry_on`, at most `within`; fails the test otherwise.
pub fn etcdctl_until(endpoints: &str, args: &[&str], retry_on: &str, within: Duration) -> std::process::Output {
    let deadline = Instant::now() + within;
    loop {
        let output = etcdctl(endpoints, args);
        if output.status.success() {
            return output;
        }
        let said = text(&output);
        assert!(
            said.contains(retry_on) && Instant::now() < deadline,
            "etcdctl {args:?}: {said}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A restore (`program snapshot restore FILE`, with etcdutl's flags) of
/// `file` into `data_dir` for a single member `infra1` at `peer`, with
/// the token the test clusters use; the caller adds flags and runs it.
pub fn restore_command(program: &[PathBuf], file: &Path, data_dir: &Path, peer: &str) -> Command {
    let mut command = Command::new(&program[0]);
    command
        .args(&program[1..])
        .args(["snapshot", "restore"])
        .arg(file)
        .args(["--name", "infra1", "--initial-cluster-token", "test-cluster"])
        .arg(format!("--initial-cluster=infra1={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg("--data-dir")
        .arg(data_dir);
    command
}

/// How long a cluster may take to report every member healthy.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(30);
/// How long connecting to a member may take before the attempt fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A gRPC channel to a member at `host:port`, each call on it bounded by
/// `call_timeout`.
pub async fn connect(
    endpoint: &str,
    call_timeout: Duration,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    tonic::transport::Endpoint::from_shared(format!("http://{endpoint}"))
        .expect("endpoints are host:port")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(call_timeout)
        .connect()
        .await
}

/// The member at `endpoint`'s Maintenance.Status.
pub async fn status(endpoint: &str, call_timeout: Duration) -> kv_server::proto::etcdserverpb::StatusResponse {
    use kv_server::proto::etcdserverpb::maintenance_client::MaintenanceClient;
    use kv_server::proto::etcdserverpb::StatusRequest;
    let channel = connect(endpoint, call_timeout).await.expect("connect");
    MaintenanceClient::new(channel)
        .status(StatusRequest {})
        .await
        .expect("status")
        .into_inner()
}

/// The largest range answer [`range`] takes: megabytes of values.
pub const RANGE_ANSWER_MAX: usize = 64 << 20;

/// The key-values in `[key, range_end)` that the member at `endpoint`
/// serves (a linearizable range), each call bounded by `call_timeout`.
pub async fn range(
    endpoint: &str,
    key: &[u8],
    range_end: &[u8],
    call_timeout: Duration,
) -> Vec<kv_server::proto::mvccpb::KeyValue> {
    use kv_server::proto::etcdserverpb::kv_client::KvClient;
    use kv_server::proto::etcdserverpb::RangeRequest;
    let channel = connect(endpoint, call_timeout).await.expect("connect");
    let request = RangeRequest {
        key: key.to_vec(),
        range_end: range_end.to_vec(),
        ..Default::default()
    };
    let mut kv = KvClient::new(channel).max_decoding_message_size(RANGE_ANSWER_MAX);
    kv.range(request).await.expect("range").into_inner().kvs
}

/// The id of the member at `endpoint`, as its Status reports it.
pub async fn member_id(endpoint: &str, call_timeout: Duration) -> u64 {
    status(endpoint, call_timeout).await.header.expect("header").member_id
}

/// The position in `endpoints` of the member that is leader, and its
/// member id, once every member's Maintenance.Status names the same
/// leader. Agreement matters after a leader was killed: until the
/// survivors' election timeout they still name the dead one, and its
/// restarted process does not lead. Waits up to `call_timeout`.
pub async fn leader(endpoints: &[String], call_timeout: Duration) -> (usize, u64) {
    let deadline = Instant::now() + call_timeout;
    loop {
        let mut members = Vec::new();
        for endpoint in endpoints {
            let status = status(endpoint, call_timeout).await;
            members.push((status.header.expect("header").member_id, status.leader));
        }
        let leader = members[0].1;
        let agreed = members.iter().all(|&(_, named)| named == leader);
        if let Some(index) = members.iter().position(|&(id, _)| id == leader).filter(|_| agreed) {
            return (index, leader);
        }
        assert!(
            Instant::now() < deadline,
            "the members never agreed on a leader: {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The index in `cluster.members` of the member that leads, from
/// `etcdctl endpoint status`.
pub fn leader_index(cluster: &Cluster) -> usize {
    let statuses = endpoint_status(&cluster.endpoints());
    let leader = statuses[0]["leader"].as_u64().expect("leader");
    statuses
        .iter()
        .position(|status| status["header"]["member_id"].as_u64() == Some(leader))
        .expect("the leader is a member")
}

/// `etcdctl endpoint status -w json`: each member's `Status` object.
pub fn endpoint_status(endpoints: &str) -> Vec<serde_json::Value> {
    let output = etcdctl(endpoints, &["endpoint", "status", "-w", "json"]);
    assert!(output.status.success(), "{}", text(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let members = status.as_array().expect("one status per member");
    members.iter().map(|member| member["Status"].clone()).collect()
}

/// (leader id, raft term) as each member reports it.
pub fn leaders_and_terms(endpoints: &str) -> Vec<(u64, u64)> {
    endpoint_status(endpoints)
        .iter()
        .map(|status| {
            (
                status["leader"].as_u64().expect("leader"),
                status["raftTerm"].as_u64().expect("raftTerm"),
            )
        })
        .collect()
}

/// Each leader change the member at `port` saw, from its /metrics.
pub fn leader_changes(port: u16) -> f64 {
    let metrics = http_get(port, "/metrics");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("etcd_server_leader_changes_seen_total "))
        .expect("etcd_server_leader_changes_seen_total")
        .trim()
        .parse()
        .expect("a number")
}

/// Asserts that `result` failed with etcd's gRPC `code` and exact
/// `message` (clients match errors by message text); `what` names the
/// case in failures.
pub fn expect_error<T: std::fmt::Debug>(
    what: &str,
    result: Result<tonic::Response<T>, tonic::Status>,
    code: tonic::Code,
    message: &str,
) {
    match result {
        Ok(response) => panic!("{what}: expected {code:?} {message:?}, got {response:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{what}: {status:?}");
            assert_eq!(status.message(), message, "{what}");
        }
    }
}

/// The binary of this project's server, built by cargo for the tests.
pub fn kv_server() -> PathBuf {
    std::env::var_os("KV_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kv-server")))
}

/// The kv-server with its failpoints compiled in, which `FAILPOINTS` in
/// its environment arms: only the fault tests run it. `scripts/test`
/// builds it (`--features failpoints`) into `KV_SERVER_FAILPOINTS_BIN`;
/// without that variable, the binary cargo built for this test, which has
/// them when the test is run with `--features failpoints`.
#[allow(dead_code)]
pub fn kv_server_with_failpoints() -> PathBuf {
    std::env::var_os("KV_SERVER_FAILPOINTS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kv-server")))
}

/// A size line of `/proc/PID/status` in bytes: `VmRSS:` (resident now)
/// or `VmHWM:` (its peak, which writing 5 to `/proc/PID/clear_refs`
/// resets).
pub fn status_bytes(pid: u32, line: &str) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("member status");
    let kib: i64 = status
        .lines()
        .find_map(|text| text.strip_prefix(line))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect(line);
    kib * 1024
}

/// Builds the Go program in `tests/go/<name>` (a client written with
/// etcd's own Go client) with `go build`, into the test's temporary
/// directory, and returns its path. CI installs Go to build etcd's tools.
/// Each test binary builds a program once: tests running at once would
/// otherwise rewrite the file while another runs it.
pub fn go_program(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, binary)) = built.iter().find(|(built, _)| built == name) {
        return binary.clone();
    }
    let binary = build_go_program(name);
    built.push((name.to_string(), binary.clone()));
    binary
}

fn build_go_program(name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go").join(name);
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-check"));
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .env("GOFLAGS", "-mod=mod")
        .status()
        .unwrap_or_else(|error| panic!("go is needed to build tests/go/{name} ({error})"));
    assert!(status.success(), "go build in {} failed", source.display());
    binary
}

/// Runs `program` with `args`, killed after `within`, and returns what it
/// printed and how it ended.
pub fn run_within(program: &Path, args: &[&str], within: Duration) -> std::process::Output {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("start {}: {error}", program.display()));
    let deadline = Instant::now() + within;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            child.kill().expect("kill");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// A tool from etcd's release, from its environment variable or the cache
/// `tools/etcd-peers/build.sh` fills. Fails the test when missing: CI
/// builds them first (see `.ci/run`).
pub fn etcd_tool(variable: &str, name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        return PathBuf::from(path);
    }
    let cached = PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/etcd-peers")
        .join(name);
    assert!(
        cached.exists(),
        "{name} not found: set {variable} or run tools/etcd-peers/build.sh (CI does this in .ci/run)"
    );
    cached
}

// Some tests name the members' type; the rest reach members through the
// cluster.
#[allow(unused_imports)]
pub use cluster::Member;

/// A test cluster: the project's one launcher (`crates/cluster`) with the
/// tests' layout (clients on `base + 10i`, peers one above) and token
/// (`test-cluster`, which [`restore_command`] matches); a member that
/// fails to start or to become healthy fails the test. Everything else
/// (`members`, `kill`, `exit_status`, `endpoints`, `add_joining`…) is the
/// launcher's own.
pub struct Cluster {
    launcher: cluster::Cluster,
    /// Where the members' data and logs are.
    pub dir: PathBuf,
}

impl std::ops::Deref for Cluster {
    type Target = cluster::Cluster;
    fn deref(&self) -> &cluster::Cluster {
        &self.launcher
    }
}

impl std::ops::DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut cluster::Cluster {
        &mut self.launcher
    }
}

impl Cluster {
    /// Starts three members with client ports `base`, `base + 10`,
    /// `base + 20` and peer ports one above each, and waits until healthy.
    pub fn start(binary: &Path, dir: &Path, base: u16, extra: &[&str]) -> Cluster {
        Cluster::start_members(binary, dir, base, 3, extra)
    }

    /// Starts `count` members, numbered and placed on ports as
    /// [`Cluster::start`] does, and waits until healthy.
    pub fn start_members(binary: &Path, dir: &Path, base: u16, count: u16, extra: &[&str]) -> Cluster {
        let mut cluster = Cluster::new(binary, dir, base, count, extra);
        cluster.start_all();
        cluster
    }

    /// Starts three members as [`Cluster::start`] does, on `https://`
    /// URLs with `certs`' TLS and certificate auth on both ports; the
    /// harness checks health as `client`.
    pub fn start_tls(
        binary: &Path,
        dir: &Path,
        base: u16,
        certs: &certs::Certs,
        client: &str,
        extra: &[&str],
    ) -> Cluster {
        let mut cluster = Cluster::new_tls(binary, dir, base, 3, certs, client, extra);
        cluster.start_all();
        cluster
    }

    /// `count` members as [`Cluster::start_tls`] sets them up, not started.
    pub fn new_tls(
        binary: &Path,
        dir: &Path,
        base: u16,
        count: u16,
        certs: &certs::Certs,
        client: &str,
        extra: &[&str],
    ) -> Cluster {
        let mut cluster = Cluster::new(binary, dir, base, count, extra);
        let pair = certs.client(client).clone();
        cluster.launcher.spec.tls = Some(cluster::Tls {
            ca: certs.ca.clone(),
            member_cert: certs.member.cert.clone(),
            member_key: certs.member.key.clone(),
            client_cert: pair.cert.clone(),
            client_key: pair.key.clone(),
        });
        let ca = certs.ca.clone();
        cluster.launcher.spec.probe = Some(cluster::Probe::Custom(std::sync::Arc::new(move |port, path| {
            certs::https_get(port, path, &ca, &pair)
        })));
        cluster
    }

    /// The members of a cluster as [`Cluster::start_members`] places them,
    /// not started: set their `env` and call [`Cluster::start_all`].
    pub fn new(binary: &Path, dir: &Path, base: u16, count: u16, extra: &[&str]) -> Cluster {
        let mut spec = cluster::Spec::new(binary, dir, count.into(), cluster::Layout::stride(base), "test-cluster");
        spec.flags = extra.iter().map(|flag| flag.to_string()).collect();
        Cluster {
            launcher: cluster::Cluster::new(spec),
            dir: dir.to_path_buf(),
        }
    }

    /// Starts every member and waits until all are healthy.
    pub fn start_all(&mut self) {
        self.launcher.start_all().expect("the members start and become healthy");
    }

    /// Starts member `i`'s process; returns at once.
    pub fn spawn(&mut self, i: usize) {
        self.launcher.spawn(i).expect("start member");
    }

    /// kill -9 of member `i`, then its start; waits until it is healthy.
    pub fn restart(&mut self, i: usize) {
        self.launcher
            .restart(i)
            .expect("the member restarts and becomes healthy");
    }

    pub fn wait_healthy(&self, which: &[usize]) {
        self.launcher.wait_healthy(which).expect("members healthy");
    }

    /// Waits until each member in `which` answers `/livez` with 200. Unlike
    /// `/health`, liveness ignores alarms, so this suits a member expected
    /// to raise one as soon as it starts.
    pub fn wait_live(&self, which: &[usize]) {
        self.launcher.wait_live(which).expect("members live");
    }
}

/// GET /health over a plain TCP connection: whether it says healthy.
pub fn healthy(port: u16) -> bool {
    health_response(port).contains("\"health\":\"true\"")
}

/// The raw HTTP response to GET /health, or an empty string when the
/// member does not answer.
pub fn health_response(port: u16) -> String {
    let Ok(mut stream) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
    if stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return String::new();
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// GET `path` on 127.0.0.1:`port` over HTTP/1.0 (so no server chunks the
/// body): the raw response, or an empty string when nothing answers.
pub fn http_get(port: u16, path: &str) -> String {
    http_request(port, "GET", path)
}

/// `method` `path` on 127.0.0.1:`port` over HTTP/1.0, as [`http_get`]. The
/// answer may take up to etcd's request timeout (7 s) and some.
pub fn http_request(port: u16, method: &str, path: &str) -> String {
    let Ok(mut stream) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// A process run for the length of a test step; killed when dropped.
pub struct Background(Child);

impl Background {
    pub fn new(child: Child) -> Background {
        Background(child)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `etcdctl watch KEY` against `endpoint`, left running until dropped.
pub fn etcdctl_watch_in_background(endpoint: &str, key: &str) -> Background {
    let child = Command::new(etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .args(["--endpoints", endpoint, "watch", key])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run etcdctl watch");
    Background(child)
}
