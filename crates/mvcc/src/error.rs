//! The store's errors. Each carries the gRPC status code and the exact
//! message etcd's clients match on (they map errors by message text), so
//! the server can pass them through unchanged.

/// gRPC status codes the store's errors map to (a subset of gRPC's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    NotFound,
    OutOfRange,
    FailedPrecondition,
    ResourceExhausted,
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOperations,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    /// A write that adds data, applied while a NOSPACE alarm is raised.
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    /// A range whose answer would encode to `bytes`, over the `max` a
    /// range may build (wire.rs): etcd's gRPC server's answer to a
    /// message over its send limit.
    #[error("grpc: trying to send message larger than max ({bytes} vs. {max})")]
    AnswerTooLarge { bytes: u64, max: u64 },
    /// The storage engine failed, or stored bytes do not decode.
    #[error("mvcc: storage: {0}")]
    Storage(String),
}

impl Error {
    pub fn code(&self) -> Code {
        match self {
            Error::Compacted | Error::FutureRevision | Error::LeaseTtlTooLarge => Code::OutOfRange,
            Error::LeaseNotFound => Code::NotFound,
            Error::LeaseExists => Code::FailedPrecondition,
            Error::Storage(_) => Code::Internal,
            Error::NoSpace | Error::AnswerTooLarge { .. } => Code::ResourceExhausted,
            Error::EmptyKey
            | Error::KeyNotFound
            | Error::DuplicateKey
            | Error::TooManyOperations
            | Error::ValueProvided
            | Error::LeaseProvided => Code::InvalidArgument,
        }
    }
}

impl From<sled::Error> for Error {
    fn from(error: sled::Error) -> Error {
        Error::Storage(error.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
