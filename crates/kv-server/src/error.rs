//! The member's errors, as types.
//!
//! - [`Error`]: why a member cannot start, or must stop. Start-up returns
//!   it to `main`, which prints it and exits with status 1; once running,
//!   a part that meets a fault it cannot go on after raises a
//!   [`Fatal`] on the member's halt (`crate::halt`), and the server
//!   returns it the same way.
//! - [`RequestError`]: why one client request failed. Its text is etcd's
//!   exact message (clients match errors by message), and `api::errors`
//!   gives each its gRPC code.

use crate::halt::Fatal;
use std::path::PathBuf;

/// Why a member cannot start, or must stop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag's value is unusable.
    #[error("--{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },
    /// Flags that cannot be used together, with etcd's message.
    #[error("{0}")]
    FlagConflict(&'static str),
    /// A file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A listener could not be bound.
    #[error("listen on {url}: {source}")]
    Listen { url: String, source: std::io::Error },
    /// Threads or the async runtime could not be started.
    #[error("starting {what}: {source}")]
    Spawn { what: &'static str, source: std::io::Error },
    #[error("WAL: {0}")]
    Wal(#[from] wal::Error),
    #[error("store: {0}")]
    Store(#[from] mvcc::Error),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// A file is not what its name says.
    #[error("{}: {what}", path.display())]
    Corrupt { path: PathBuf, what: String },
    /// The membership the store keeps does not decode.
    #[error("the stored membership does not decode: {0}")]
    BadMembership(String),
    /// The auth state the store keeps does not decode.
    #[error("the stored auth state does not decode: {0}")]
    BadAuth(String),
    /// A member joining an existing cluster could not learn its membership.
    #[error("could not join the cluster: {0}")]
    Join(String),
    /// A fault stopped the running member (see `halt`).
    #[error(transparent)]
    Fatal(#[from] Fatal),
    /// This member was removed from the cluster; its data dir is done.
    #[error("the member has been permanently removed from the cluster")]
    Removed,
    /// A replayed WAL entry is not a raft entry.
    #[error("WAL entry {index} does not decode: {reason}")]
    BadWalEntry { index: u64, reason: String },
    /// The data directory was made by another member or cluster.
    #[error("{} belongs to another member or cluster (its ids differ from this member's)", dir.display())]
    ForeignDataDir { dir: PathBuf },
    /// A snapshot install was cut short and its file is gone.
    #[error(
        "{}: the store holds part of a snapshot whose file is gone; remove the data directory and let the \
         member catch up from the others",
        dir.display()
    )]
    PartialRestore { dir: PathBuf },
    /// `kv-server snapshot restore` stopped part way through this data
    /// directory.
    #[error(
        "{}: `kv-server snapshot restore` did not finish here; remove the data directory and run the restore again",
        dir.display()
    )]
    UnfinishedRestore { dir: PathBuf },
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

/// Why one client request failed. The text of each is etcd's message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RequestError {
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: leader changed")]
    LeaderChanged,
    #[error("etcdserver: request timed out")]
    TimedOut,
    #[error("etcdserver: too many requests")]
    TooManyRequests,
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    #[error("etcdserver: server stopped")]
    Stopped,
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    #[error("etcdserver: not leader")]
    NotLeader,
    #[error("etcdserver: bad leader transferee")]
    BadLeaderTransferee,
    #[error("etcdserver: request timed out, leader transfer took too long")]
    LeaderTransferTimedOut,
    #[error("etcdserver: member ID already exist")]
    MemberExists,
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExists,
    #[error("etcdserver: re-configuration failed due to not enough started members")]
    NotEnoughStarted,
    #[error("etcdserver: given member URLs are invalid")]
    BadMemberUrls,
    #[error("etcdserver: member not found")]
    MemberNotFound,
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    #[error("etcdserver: can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    #[error("etcdserver: too many learner members in cluster")]
    TooManyLearners,
    #[error("etcdserver: unhealthy cluster")]
    Unhealthy,
    #[error("etcdserver: corrupt cluster")]
    Corrupt,
    #[error("etcdserver: rpc not supported for learner")]
    NotSupportedForLearner,
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserAlreadyExists,
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExists,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    /// etcd 3.5 returns its auth store's own error here, not a gRPC one.
    #[error("auth: authentication failed, password was given for no password user")]
    NoPasswordUser,
    #[error("etcdserver: wrong downgrade target version format")]
    DowngradeVersionFormat,
    #[error("etcdserver: invalid downgrade target version")]
    DowngradeTargetVersion,
    #[error("etcdserver: no inflight downgrade job")]
    NoInflightDowngrade,
    #[error("etcdserver: permission not given")]
    PermissionNotGiven,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    #[error("etcdserver: authentication is not enabled")]
    AuthNotEnabled,
    #[error("etcdserver: invalid auth token")]
    InvalidAuthToken,
    #[error("etcdserver: invalid auth management")]
    InvalidAuthManagement,
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
    /// The store refused the request (its errors carry etcd's messages).
    #[error(transparent)]
    Store(#[from] mvcc::Error),
    /// A call forwarded to the leader failed there: its answer, as is.
    #[error("{}", .0.message())]
    Forwarded(tonic::Status),
}
