//! What a cluster is made of, before it starts: the member binary, the
//! directory for data and logs, the ports, the cluster token, the flags
//! and environment every member gets, TLS, and the CPUs members run on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::layout::Layout;
use crate::probe::Probe;

/// How long members may take to report healthy after a (re)start, unless
/// a spec says otherwise: a member replaying a large WAL on a loaded
/// machine takes seconds, and one opening a store of ten million keys
/// rebuilds its index from it: three such members restarting together
/// took about 44 s on the project's 2-core machine, past the 30 s this
/// was, so `local-cluster.sh start` could not reopen them.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(120);

/// Certificates from one directory as `scripts/make-certs.sh` (or the
/// tests' generator) lays them out: the CA, the members' pair, and a
/// client pair for the probes.
#[derive(Debug, Clone)]
pub struct Tls {
    pub ca: PathBuf,
    pub member_cert: PathBuf,
    pub member_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Tls {
    /// The files of a directory `scripts/make-certs.sh` filled.
    pub fn from_dir(dir: &Path) -> Tls {
        Tls {
            ca: dir.join("ca.pem"),
            member_cert: dir.join("member.pem"),
            member_key: dir.join("member-key.pem"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client-key.pem"),
        }
    }

    /// etcd's flags for TLS with certificate auth on client and peer URLs.
    pub fn member_flags(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        [
            ("--cert-file", path(&self.member_cert)),
            ("--key-file", path(&self.member_key)),
            ("--trusted-ca-file", path(&self.ca)),
            ("--peer-cert-file", path(&self.member_cert)),
            ("--peer-key-file", path(&self.member_key)),
            ("--peer-trusted-ca-file", path(&self.ca)),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .chain(["--client-cert-auth".into(), "--peer-client-cert-auth".into()])
        .collect()
    }
}

/// A cluster to start.
#[derive(Clone)]
pub struct Spec {
    /// The member binary: kv-server or etcd.
    pub binary: PathBuf,
    /// Member `name`'s data goes in `dir/name`, its log in `dir/name.log`.
    pub dir: PathBuf,
    pub members: usize,
    pub layout: Layout,
    /// `--initial-cluster-token`.
    pub token: String,
    /// Flags after the launcher's own, for every member at every start.
    pub flags: Vec<String>,
    /// Environment for every member at every start.
    pub env: Vec<(String, String)>,
    /// With TLS, URLs are `https://` and both ports ask for client
    /// certificates.
    pub tls: Option<Tls>,
    /// A CPU list for `taskset -c`: members start bound to those CPUs, so
    /// Go's GOMAXPROCS and tokio's worker count follow the affinity.
    pub cpus: Option<String>,
    /// Whether a member's stdout goes to its log too (the scripts'), or
    /// nowhere (the tests': only stderr carries the log).
    pub stdout_to_log: bool,
    /// How health is probed; by default plain HTTP, or `curl` with TLS.
    pub probe: Option<Probe>,
    /// How long a wait for health or liveness may take
    /// ([`HEALTHY_WITHIN`] unless set).
    pub healthy_within: Duration,
}

impl Spec {
    /// `members` members of `binary` under `dir` on `layout`, with the
    /// cluster token `token` and nothing else.
    pub fn new(binary: &Path, dir: &Path, members: usize, layout: Layout, token: &str) -> Spec {
        Spec {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            members,
            layout,
            token: token.to_string(),
            flags: Vec::new(),
            env: Vec::new(),
            tls: None,
            cpus: None,
            stdout_to_log: false,
            probe: None,
            healthy_within: HEALTHY_WITHIN,
        }
    }

    /// The URL scheme members use.
    pub fn scheme(&self) -> &'static str {
        match self.tls {
            Some(_) => "https",
            None => "http",
        }
    }

    /// The probe health is checked with.
    pub fn probe(&self) -> Probe {
        match (&self.probe, &self.tls) {
            (Some(probe), _) => probe.clone(),
            (None, Some(tls)) => Probe::Curl {
                ca: tls.ca.clone(),
                cert: tls.client_cert.clone(),
                key: tls.client_key.clone(),
            },
            (None, None) => Probe::Plain,
        }
    }
}
