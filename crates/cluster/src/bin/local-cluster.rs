//! `local-cluster`: the scripts' launcher, a 3-member cluster of real
//! member processes on loopback with etcd's flags, for kv-server or a real
//! etcd binary (the same flags), through the `cluster` crate.
//!
//! ```text
//! local-cluster start BINARY DIR [extra member flags...]
//! local-cluster stop DIR
//! local-cluster restart BINARY DIR I [extra member flags...]
//! local-cluster endpoints
//! ```
//!
//! Members: infra1 (clients 2379, peers 2380), infra2 (22379, 22380),
//! infra3 (32379, 32380), token `local-cluster`. Data and logs go under
//! DIR, the members' pids in DIR/pids, one line per member. `start` waits
//! (at most `cluster::launch::HEALTHY_WITHIN`) until every member is
//! healthy, and leaves them running. `restart` is kill -9 of member I
//! (1, 2 or 3) and its start on its data; it returns at once (the caller
//! waits for it to serve). `stop` is etcd's graceful stop, SIGTERM then
//! SIGKILL. With TLS_DIR set to a directory `scripts/make-certs.sh`
//! filled, URLs are https:// with certificate auth on both ports. With
//! MEMBER_CPUS set (a taskset CPU list), members start bound to those
//! CPUs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster::{launch, Cluster, Layout, Spec, Tls};

/// Members of the scripts' clusters.
const MEMBERS: usize = 3;
/// How long a killed member may take to be gone before its restart.
const KILLED_WITHIN: Duration = Duration::from_secs(1);
const USAGE: &str =
    "usage: local-cluster start BINARY DIR [flags...] | stop DIR | restart BINARY DIR I [flags...] | endpoints";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["start", binary, dir, flags @ ..] => start(Path::new(binary), Path::new(dir), flags),
        ["stop", dir] => stop(Path::new(dir)),
        ["restart", binary, dir, i, flags @ ..] => restart(Path::new(binary), Path::new(dir), i, flags),
        ["endpoints"] => {
            println!("{}", Cluster::new(spec(Path::new(""), Path::new(""), &[])).endpoints());
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(error) = result {
        eprintln!("local-cluster: {error}");
        std::process::exit(1);
    }
}

/// The scripts' cluster of `binary` under `dir`, from the environment.
fn spec(binary: &Path, dir: &Path, flags: &[&str]) -> Spec {
    let mut spec = Spec::new(binary, dir, MEMBERS, Layout::Classic, "local-cluster");
    spec.flags = flags.iter().map(|flag| flag.to_string()).collect();
    spec.tls = std::env::var_os("TLS_DIR")
        .filter(|dir| !dir.is_empty())
        .map(|dir| Tls::from_dir(&PathBuf::from(dir)));
    spec.cpus = std::env::var("MEMBER_CPUS").ok().filter(|cpus| !cpus.is_empty());
    spec.stdout_to_log = true;
    spec
}

fn pids_file(dir: &Path) -> PathBuf {
    dir.join("pids")
}

fn write_pids(dir: &Path, pids: &[u32]) -> std::io::Result<()> {
    let lines: String = pids.iter().map(|pid| format!("{pid}\n")).collect();
    std::fs::write(pids_file(dir), lines)
}

fn read_pids(dir: &Path) -> std::io::Result<Vec<u32>> {
    let text = std::fs::read_to_string(pids_file(dir))?;
    Ok(text.lines().filter_map(|line| line.trim().parse().ok()).collect())
}

fn start(binary: &Path, dir: &Path, flags: &[&str]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut cluster = Cluster::new(spec(binary, dir, flags));
    for i in 0..MEMBERS {
        cluster.spawn(i)?;
    }
    let pids: Vec<u32> = cluster.members.iter().filter_map(|m| m.pid()).collect();
    write_pids(dir, &pids)?;
    if let Err(error) = cluster.wait_healthy(&(0..MEMBERS).collect::<Vec<_>>()) {
        // The members are killed as the handle drops: no pid is left for
        // a later stop to signal.
        let _ = std::fs::remove_file(pids_file(dir));
        return Err(error);
    }
    cluster.detach();
    Ok(())
}

fn stop(dir: &Path) -> std::io::Result<()> {
    if !pids_file(dir).exists() {
        return Ok(());
    }
    launch::terminate(&read_pids(dir)?);
    std::fs::remove_file(pids_file(dir))
}

fn restart(binary: &Path, dir: &Path, which: &str, flags: &[&str]) -> std::io::Result<()> {
    let i = match which.parse::<usize>() {
        Ok(i) if (1..=MEMBERS).contains(&i) => i - 1,
        _ => return Err(std::io::Error::other(format!("member {which}: not 1, 2 or 3"))),
    };
    let mut pids = read_pids(dir)?;
    if let Some(&old) = pids.get(i) {
        launch::end(&[old], &[libc::SIGKILL], KILLED_WITHIN);
    }
    let mut cluster = Cluster::new(spec(binary, dir, flags));
    cluster.spawn(i)?;
    let new = cluster.detach();
    pids.resize(MEMBERS.max(pids.len()), 0);
    pids[i] = new[0];
    write_pids(dir, &pids)
}
