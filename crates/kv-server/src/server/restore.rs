//! `kv-server snapshot restore FILE`: a new member's data directory from a
//! snapshot file saved with `etcdctl snapshot save`, from kv-server
//! (`storage::backup`) or from etcd (`storage::etcd_backup`, recognised by
//! its bbolt magic), as etcdutl's restore makes one from etcd's. It takes
//! etcdutl's flags.
//!
//! The store gets the snapshot's keys, leases and revisions, and the
//! membership the flags describe; the raft log starts afresh for that
//! cluster after a snapshot at the store's new consistent index, as a new
//! cluster's does (`server::start::bootstrap`). Its WAL is created here,
//! owned by that cluster and member; from then on the member reads its
//! membership from its store, and its flags' cluster settings are not
//! needed. Each member of the new cluster is restored from the same file
//! with its own `--name`.
//!
//! If the command is stopped part way, the data directory is left behind,
//! marked (`member/restore.unfinished`, made first and removed last): a
//! member refuses to start from it, and a second restore refuses it;
//! remove it and run the restore again.

use std::io::Write as _;
use std::path::PathBuf;

use clap::Parser;

use crate::config::Config;
use crate::error::Error;
use crate::membership::Membership;
use crate::server::start::bootstrap;
use crate::storage::layout::DataDir;
use crate::storage::{backup, etcd_backup};

#[derive(Debug, Parser)]
#[command(
    name = "kv-server snapshot restore",
    about = "Builds a new member's data directory from a snapshot file"
)]
pub struct RestoreArgs {
    /// The snapshot file, as `etcdctl snapshot save` wrote it.
    pub file: PathBuf,
    /// The new member's name.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Where to put the data directory (default: `<name>.etcd`); it must
    /// not exist.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// `name=peer-url,...` for every member of the new cluster.
    #[arg(long, default_value = "default=http://localhost:2380")]
    pub initial_cluster: String,
    /// The new cluster's token.
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    /// This member's peer URLs.
    #[arg(long, default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: String,
    /// Restore without checking the file's SHA-256 (a file copied from a
    /// member's disk rather than saved has none).
    #[arg(long)]
    pub skip_hash_check: bool,
}

/// Restores `args.file` into a new data directory; returns its path.
pub fn restore(args: &RestoreArgs) -> Result<PathBuf, Error> {
    let mut flags = vec![
        "kv-server".to_string(),
        format!("--name={}", args.name),
        format!("--initial-cluster={}", args.initial_cluster),
        format!("--initial-cluster-token={}", args.initial_cluster_token),
        format!("--initial-advertise-peer-urls={}", args.initial_advertise_peer_urls),
    ];
    if let Some(dir) = &args.data_dir {
        flags.push(format!("--data-dir={}", dir.display()));
    }
    let config = Config::try_parse_from(flags).map_err(|e| Error::Flag {
        flag: "initial-cluster",
        reason: e.to_string(),
    })?;
    let membership = Membership::new_cluster(&config.initial_cluster, &config.initial_cluster_token, &config.name)?;
    let root = config.data_dir();
    if root.exists() {
        // etcdutl's words.
        return Err(Error::Flag {
            flag: "data-dir",
            reason: format!("data-dir {:?} exists", root.display().to_string()),
        });
    }
    let from_etcd = etcd_backup::is_etcd_snapshot(&args.file)?;
    // Checked before anything is written.
    let backup = if from_etcd {
        None
    } else {
        Some(backup::open(&args.file, !args.skip_hash_check)?)
    };
    let dir = DataDir::new(root.clone());
    let logged = |message: &str| {
        tracing::info!(
            path = %args.file.display(),
            "wal-dir" = %dir.wal().display(),
            "data-dir" = %root.display(),
            "snap-dir" = %dir.member().display(),
            "{message}"
        )
    };
    logged("restoring snapshot");
    dir.create()?;
    let unfinished = dir.unfinished_restore();
    std::fs::File::create(&unfinished)
        .and_then(|file| file.sync_all())
        .map_err(Error::io(&unfinished))?;
    sync_dir(&dir.member())?;
    let store = mvcc::Store::open(&dir.store())?;
    bootstrap(&dir, &membership, &wal::Options::default(), |index| {
        match backup {
            Some(backup) => store.restore_for_new_cluster(backup.dump, index, membership.encode())?,
            None => restore_etcds(&args.file, !args.skip_hash_check, &dir, &store, index, &membership)?,
        }
        store.flush()?;
        Ok(())
    })?;
    std::fs::remove_file(&unfinished).map_err(Error::io(&unfinished))?;
    sync_dir(&dir.member())?;
    logged("restored snapshot");
    Ok(root)
}

fn sync_dir(path: &std::path::Path) -> Result<(), Error> {
    std::fs::File::open(path)
        .and_then(|dir| dir.sync_all())
        .map_err(Error::io(path))
}

/// Restores from a snapshot etcd wrote: converted to a dump in the data
/// directory, restored from it, and the dump removed.
fn restore_etcds(
    file: &std::path::Path,
    check: bool,
    dir: &DataDir,
    store: &mvcc::Store,
    index: u64,
    membership: &Membership,
) -> Result<(), Error> {
    let dump = dir.imported_dump();
    let out = std::fs::File::create(&dump).map_err(Error::io(&dump))?;
    let mut out = std::io::BufWriter::new(out);
    etcd_backup::convert(file, check, &mut out)?;
    out.flush().map_err(Error::io(&dump))?;
    drop(out);
    let input = std::fs::File::open(&dump).map_err(Error::io(&dump))?;
    store.restore_for_new_cluster(std::io::BufReader::new(input), index, membership.encode())?;
    std::fs::remove_file(&dump).map_err(Error::io(&dump))
}
