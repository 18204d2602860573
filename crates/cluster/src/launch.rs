//! A running cluster: its members' processes, started with etcd's flags
//! from a [`Spec`], killed, signalled and restarted one at a time, and
//! probed until they serve.
//!
//! A member's command line is, in this order: `--name`, `--data-dir`, the
//! client and peer URLs (listen and advertise), `--initial-cluster`,
//! `--initial-cluster-token`, `--initial-cluster-state` (`new`, or
//! `existing` for a member that joins a running cluster), the TLS flags,
//! then the spec's flags: a flag given again later wins, so callers can
//! override any of the launcher's.

use std::fs::OpenOptions;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::spec::Spec;

pub use crate::spec::HEALTHY_WITHIN;
/// How long a stopped member may take to be gone (and free its ports).
pub const GONE_WITHIN: Duration = Duration::from_secs(5);
/// The pause between two probes of a wait.
pub const POLL: Duration = Duration::from_millis(100);

/// One member: where it listens, and its process once started.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub advertised_peer_port: u16,
    /// Environment for this member's every start, after the cluster's
    /// (failpoints, say).
    pub env: Vec<(String, String)>,
    /// For a member added to a running cluster: the `ETCD_INITIAL_CLUSTER`
    /// line `etcdctl member add` printed; it starts with state existing.
    pub joins: Option<String>,
    pub child: Option<Child>,
}

impl Member {
    /// `127.0.0.1:port` of its client URL.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// The members of one cluster. Dropped, it kills them (unless detached).
pub struct Cluster {
    pub spec: Spec,
    pub members: Vec<Member>,
    detached: bool,
}

impl Cluster {
    /// The cluster's members, placed by the spec's layout, not started:
    /// set their `env`, then call [`Cluster::start_all`].
    pub fn new(spec: Spec) -> Cluster {
        let members = (0..spec.members)
            .map(|i| Member {
                name: format!("infra{}", i + 1),
                client_port: spec.layout.client_port(i),
                peer_port: spec.layout.peer_port(i),
                advertised_peer_port: spec.layout.advertised_peer_port(i),
                env: Vec::new(),
                joins: None,
                child: None,
            })
            .collect();
        Cluster {
            spec,
            members,
            detached: false,
        }
    }

    /// Starts every member of `spec` and waits until all are healthy.
    pub fn start(spec: Spec) -> io::Result<Cluster> {
        let mut cluster = Cluster::new(spec);
        cluster.start_all()?;
        Ok(cluster)
    }

    /// Starts every member and waits until all are healthy.
    pub fn start_all(&mut self) -> io::Result<()> {
        std::fs::create_dir_all(&self.spec.dir)?;
        let all: Vec<usize> = (0..self.members.len()).collect();
        for &i in &all {
            self.spawn(i)?;
        }
        self.wait_healthy(&all)
    }

    /// Adds (without starting it) a member named `name` on `client_port`
    /// (its peer port one above) that joins with what `etcdctl member
    /// add` printed, `said`, and `env`; returns its index.
    pub fn add_joining(&mut self, name: &str, client_port: u16, said: &str, env: Vec<(String, String)>) -> usize {
        let line = said
            .lines()
            .find_map(|l| l.strip_prefix("ETCD_INITIAL_CLUSTER=\""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_else(|| panic!("no ETCD_INITIAL_CLUSTER in {said}"));
        self.members.push(Member {
            name: name.into(),
            client_port,
            peer_port: client_port + 1,
            advertised_peer_port: client_port + 1,
            env,
            joins: Some(line.to_string()),
            child: None,
        });
        self.members.len() - 1
    }

    /// The client endpoints, comma-separated, as etcd's tools take them.
    pub fn endpoints(&self) -> String {
        self.members.iter().map(Member::endpoint).collect::<Vec<_>>().join(",")
    }

    /// `--initial-cluster`: the founding members' advertised peer URLs.
    pub fn initial_cluster(&self) -> String {
        let scheme = self.spec.scheme();
        self.members
            .iter()
            .filter(|m| m.joins.is_none())
            .map(|m| format!("{}={scheme}://127.0.0.1:{}", m.name, m.advertised_peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.spec.dir.join(&self.members[i].name)
    }

    /// Member `i`'s log file.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.spec.dir.join(format!("{}.log", self.members[i].name))
    }

    /// Member `i`'s WAL directory (etcd's layout, which kv-server keeps).
    pub fn wal_dir(&self, i: usize) -> PathBuf {
        self.data_dir(i).join("member/wal")
    }

    /// Member `i`'s command line (see the module's doc), its output
    /// appended to its log.
    pub fn command(&self, i: usize, extra_env: &[(String, String)]) -> io::Result<Command> {
        let member = &self.members[i];
        let (initial_cluster, state) = match &member.joins {
            Some(line) => (line.clone(), "existing"),
            None => (self.initial_cluster(), "new"),
        };
        let scheme = self.spec.scheme();
        let client = format!("{scheme}://127.0.0.1:{}", member.client_port);
        let peer = format!("{scheme}://127.0.0.1:{}", member.peer_port);
        let advertised = format!("{scheme}://127.0.0.1:{}", member.advertised_peer_port);
        let log = OpenOptions::new().create(true).append(true).open(self.log_path(i))?;
        let mut command = match &self.spec.cpus {
            Some(cpus) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", cpus]).arg(&self.spec.binary);
                taskset
            }
            None => Command::new(&self.spec.binary),
        };
        command
            .args(["--name", &member.name])
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &advertised,
            ])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-token", &self.spec.token])
            .args(["--initial-cluster-state", state])
            .args(self.spec.tls.iter().flat_map(|tls| tls.member_flags()))
            .args(&self.spec.flags)
            .envs(
                self.spec
                    .env
                    .iter()
                    .chain(&member.env)
                    .chain(extra_env)
                    .map(|(k, v)| (k, v)),
            )
            .stdin(Stdio::null());
        match self.spec.stdout_to_log {
            true => command.stdout(log.try_clone()?),
            false => command.stdout(Stdio::null()),
        };
        command.stderr(log);
        Ok(command)
    }

    /// Starts member `i`'s process; returns at once.
    pub fn spawn(&mut self, i: usize) -> io::Result<()> {
        self.spawn_with(i, &[])
    }

    /// Starts member `i`'s process with `extra_env` for this start only.
    pub fn spawn_with(&mut self, i: usize, extra_env: &[(String, String)]) -> io::Result<()> {
        let child = self.command(i, extra_env)?.spawn()?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// How member `i`'s process ended, if it has.
    pub fn exit_status(&mut self, i: usize) -> Option<ExitStatus> {
        self.members[i]
            .child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Waits, at most `within`, for member `i`'s process to end.
    pub fn wait_exit(&mut self, i: usize, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exit_status(i) {
                self.members[i].child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no chance to flush anything. Returns once it is reaped.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, SIGTERM…) to member `i`.
    pub fn signal(&self, i: usize, signal: libc::c_int) {
        if let Some(pid) = self.members[i].pid() {
            // SAFETY: kill(2) with a child's pid and a valid signal number.
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }

    /// kill -9 of member `i`, then its start on its data; waits until it
    /// is healthy.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_healthy(&[i])
    }

    /// Whether member `i` says it is healthy.
    pub fn is_healthy(&self, i: usize) -> bool {
        self.spec.probe().healthy(self.members[i].client_port)
    }

    /// Waits until each member in `which` is healthy, at most the spec's
    /// `healthy_within`.
    pub fn wait_healthy(&self, which: &[usize]) -> io::Result<()> {
        let probe = self.spec.probe();
        self.wait_for(which, "healthy", |i| probe.healthy(self.members[i].client_port))
    }

    /// Waits until each member in `which` answers `/livez` with 200, at
    /// most the spec's `healthy_within`: for members expected to raise an alarm as
    /// they start, which health would report.
    pub fn wait_live(&self, which: &[usize]) -> io::Result<()> {
        let probe = self.spec.probe();
        self.wait_for(which, "live", |i| probe.live(self.members[i].client_port))
    }

    fn wait_for(&self, which: &[usize], what: &str, probe: impl Fn(usize) -> bool) -> io::Result<()> {
        let within = self.spec.healthy_within;
        let deadline = Instant::now() + within;
        while !which.iter().all(|&i| probe(i)) {
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "members {which:?} not {what} within {within:?}; logs in {}",
                    self.spec.dir.display()
                )));
            }
            std::thread::sleep(POLL);
        }
        Ok(())
    }

    /// SIGKILL of every member (a paused one is resumed first, so that it
    /// dies at once).
    pub fn stop(&mut self) {
        for i in 0..self.members.len() {
            self.signal(i, libc::SIGCONT);
            self.kill(i);
        }
    }

    /// Leaves the members running past this handle (the `local-cluster`
    /// binary's start): returns their process ids, in member order.
    pub fn detach(mut self) -> Vec<u32> {
        self.detached = true;
        self.members.iter().filter_map(Member::pid).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.detached {
            self.stop();
        }
    }
}

/// etcd's graceful stop for processes this launcher did not start (the
/// `local-cluster` binary's stop, by pid): SIGTERM, at most
/// [`GONE_WITHIN`] for them to end, then SIGKILL and as long again, so
/// that the next cluster on their ports does not start before they are
/// gone.
pub fn terminate(pids: &[u32]) {
    end(pids, &[libc::SIGTERM, libc::SIGKILL], GONE_WITHIN);
}

/// Sends each of `signals` in turn to those of `pids` still alive, and
/// after each waits, at most `within`, until none is.
pub fn end(pids: &[u32], signals: &[libc::c_int], within: Duration) {
    let alive = |pid: &u32| {
        // SAFETY: kill(2) with signal 0 only checks that the pid exists.
        unsafe { libc::kill(*pid as libc::pid_t, 0) == 0 }
    };
    for &signal in signals {
        for pid in pids.iter().filter(|pid| alive(pid)) {
            // SAFETY: as above, with a valid signal number.
            unsafe {
                libc::kill(*pid as libc::pid_t, signal);
            }
        }
        let deadline = Instant::now() + within;
        while pids.iter().any(alive) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10).min(POLL));
        }
    }
}
