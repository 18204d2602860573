//! Errors as gRPC statuses, with etcd's codes and exact messages (clients
//! map errors by message text). The messages are the errors' own
//! (`crate::error::RequestError`, `mvcc::Error`); this gives each its
//! code, as etcd's `rpctypes` does.

use tonic::{Code, Status};

use crate::error::RequestError;

/// A store error's status.
pub fn store_status(error: &mvcc::Error) -> Status {
    let code = match error.code() {
        mvcc::Code::InvalidArgument => Code::InvalidArgument,
        mvcc::Code::NotFound => Code::NotFound,
        mvcc::Code::OutOfRange => Code::OutOfRange,
        mvcc::Code::FailedPrecondition => Code::FailedPrecondition,
        mvcc::Code::ResourceExhausted => Code::ResourceExhausted,
        mvcc::Code::Internal => Code::Internal,
    };
    Status::new(code, error.to_string())
}

/// `message`, if it is within etcd's gRPC send limit (`math.MaxInt32`,
/// mvcc's wire.rs); otherwise etcd's refusal to send it. A Range's
/// answer is bounded while the store builds it; this checks the answers
/// that are built whole before they are sent: a write txn's and a
/// delete's, applied on every member as etcd applies them, and a
/// read-only txn's, whose ranges are bounded one by one.
pub fn sendable<M: prost::Message>(message: M) -> Result<M, Status> {
    let bytes = message.encoded_len() as u64;
    if bytes > mvcc::wire::ANSWER_BYTES_MAX {
        let max = mvcc::wire::ANSWER_BYTES_MAX;
        return Err(store_status(&mvcc::Error::AnswerTooLarge { bytes, max }));
    }
    Ok(message)
}

impl From<RequestError> for Status {
    fn from(error: RequestError) -> Status {
        let code = match &error {
            RequestError::Store(store) => return store_status(store),
            RequestError::Forwarded(status) => return status.clone(),
            RequestError::NoLeader
            | RequestError::LeaderChanged
            | RequestError::TimedOut
            | RequestError::Stopped
            | RequestError::LeaderTransferTimedOut
            | RequestError::Unhealthy
            | RequestError::NotSupportedForLearner => Code::Unavailable,
            // etcd 3.5 maps this one to its client-side error value, not
            // a gRPC status, so gRPC sends it as Unknown.
            RequestError::NotEnoughStarted | RequestError::NoPasswordUser => Code::Unknown,
            RequestError::DowngradeVersionFormat | RequestError::DowngradeTargetVersion => Code::InvalidArgument,
            RequestError::NoInflightDowngrade => Code::FailedPrecondition,
            RequestError::MemberExists
            | RequestError::PeerUrlExists
            | RequestError::MemberNotLearner
            | RequestError::LearnerNotReady
            | RequestError::TooManyLearners => Code::FailedPrecondition,
            RequestError::BadMemberUrls => Code::InvalidArgument,
            RequestError::Corrupt => Code::DataLoss,
            RequestError::MemberNotFound => Code::NotFound,
            RequestError::TooManyRequests | RequestError::NoSpace => Code::ResourceExhausted,
            RequestError::RequestTooLarge => Code::InvalidArgument,
            RequestError::NotLeader | RequestError::BadLeaderTransferee => Code::FailedPrecondition,
            RequestError::RootUserNotExist
            | RequestError::RootRoleNotExist
            | RequestError::UserAlreadyExists
            | RequestError::UserNotFound
            | RequestError::RoleAlreadyExists
            | RequestError::RoleNotFound
            | RequestError::RoleNotGranted
            | RequestError::PermissionNotGranted
            | RequestError::AuthNotEnabled => Code::FailedPrecondition,
            RequestError::UserEmpty
            | RequestError::RoleEmpty
            | RequestError::AuthFailed
            | RequestError::PermissionNotGiven
            | RequestError::InvalidAuthManagement
            | RequestError::AuthOldRevision => Code::InvalidArgument,
            RequestError::PermissionDenied => Code::PermissionDenied,
            RequestError::InvalidAuthToken => Code::Unauthenticated,
        };
        Status::new(code, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: each error has etcd's code and exact message (etcd 3.5's
    // `api/v3rpc/rpctypes/error.go`).
    #[test]
    fn statuses_are_etcds() {
        let cases = [
            (RequestError::NoLeader, Code::Unavailable, "etcdserver: no leader"),
            (
                RequestError::LeaderChanged,
                Code::Unavailable,
                "etcdserver: leader changed",
            ),
            (
                RequestError::TimedOut,
                Code::Unavailable,
                "etcdserver: request timed out",
            ),
            (
                RequestError::TooManyRequests,
                Code::ResourceExhausted,
                "etcdserver: too many requests",
            ),
            (
                RequestError::RequestTooLarge,
                Code::InvalidArgument,
                "etcdserver: request is too large",
            ),
            (RequestError::Stopped, Code::Unavailable, "etcdserver: server stopped"),
            (
                RequestError::NoSpace,
                Code::ResourceExhausted,
                "etcdserver: mvcc: database space exceeded",
            ),
            (
                RequestError::NotLeader,
                Code::FailedPrecondition,
                "etcdserver: not leader",
            ),
            (
                RequestError::BadLeaderTransferee,
                Code::FailedPrecondition,
                "etcdserver: bad leader transferee",
            ),
            (
                RequestError::LeaderTransferTimedOut,
                Code::Unavailable,
                "etcdserver: request timed out, leader transfer took too long",
            ),
            (
                RequestError::MemberExists,
                Code::FailedPrecondition,
                "etcdserver: member ID already exist",
            ),
            (
                RequestError::PeerUrlExists,
                Code::FailedPrecondition,
                "etcdserver: Peer URLs already exists",
            ),
            (
                RequestError::NotEnoughStarted,
                Code::Unknown,
                "etcdserver: re-configuration failed due to not enough started members",
            ),
            (
                RequestError::BadMemberUrls,
                Code::InvalidArgument,
                "etcdserver: given member URLs are invalid",
            ),
            (
                RequestError::MemberNotFound,
                Code::NotFound,
                "etcdserver: member not found",
            ),
            (
                RequestError::MemberNotLearner,
                Code::FailedPrecondition,
                "etcdserver: can only promote a learner member",
            ),
            (
                RequestError::LearnerNotReady,
                Code::FailedPrecondition,
                "etcdserver: can only promote a learner member which is in sync with leader",
            ),
            (
                RequestError::TooManyLearners,
                Code::FailedPrecondition,
                "etcdserver: too many learner members in cluster",
            ),
            (
                RequestError::Unhealthy,
                Code::Unavailable,
                "etcdserver: unhealthy cluster",
            ),
            (RequestError::Corrupt, Code::DataLoss, "etcdserver: corrupt cluster"),
            (
                RequestError::NotSupportedForLearner,
                Code::Unavailable,
                "etcdserver: rpc not supported for learner",
            ),
            (
                RequestError::RootUserNotExist,
                Code::FailedPrecondition,
                "etcdserver: root user does not exist",
            ),
            (
                RequestError::RootRoleNotExist,
                Code::FailedPrecondition,
                "etcdserver: root user does not have root role",
            ),
            (
                RequestError::UserAlreadyExists,
                Code::FailedPrecondition,
                "etcdserver: user name already exists",
            ),
            (
                RequestError::UserEmpty,
                Code::InvalidArgument,
                "etcdserver: user name is empty",
            ),
            (
                RequestError::UserNotFound,
                Code::FailedPrecondition,
                "etcdserver: user name not found",
            ),
            (
                RequestError::RoleAlreadyExists,
                Code::FailedPrecondition,
                "etcdserver: role name already exists",
            ),
            (
                RequestError::RoleNotFound,
                Code::FailedPrecondition,
                "etcdserver: role name not found",
            ),
            (
                RequestError::RoleEmpty,
                Code::InvalidArgument,
                "etcdserver: role name is empty",
            ),
            (
                RequestError::AuthFailed,
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            (
                RequestError::PermissionNotGiven,
                Code::InvalidArgument,
                "etcdserver: permission not given",
            ),
            (
                RequestError::PermissionDenied,
                Code::PermissionDenied,
                "etcdserver: permission denied",
            ),
            (
                RequestError::RoleNotGranted,
                Code::FailedPrecondition,
                "etcdserver: role is not granted to the user",
            ),
            (
                RequestError::PermissionNotGranted,
                Code::FailedPrecondition,
                "etcdserver: permission is not granted to the role",
            ),
            (
                RequestError::AuthNotEnabled,
                Code::FailedPrecondition,
                "etcdserver: authentication is not enabled",
            ),
            (
                RequestError::InvalidAuthToken,
                Code::Unauthenticated,
                "etcdserver: invalid auth token",
            ),
            (
                RequestError::InvalidAuthManagement,
                Code::InvalidArgument,
                "etcdserver: invalid auth management",
            ),
            (
                RequestError::AuthOldRevision,
                Code::InvalidArgument,
                "etcdserver: revision of auth store is old",
            ),
            (
                RequestError::Store(mvcc::Error::Compacted),
                Code::OutOfRange,
                "etcdserver: mvcc: required revision has been compacted",
            ),
        ];
        for (error, code, message) in cases {
            let status = Status::from(error);
            assert_eq!((status.code(), status.message()), (code, message));
        }
    }
}
