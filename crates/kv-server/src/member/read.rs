//! Reads served by the core, as etcd's server serves Range and read-only
//! Txn (`v3_server.go`): the learner check, the ReadIndex round a
//! linearizable read waits for, one view of this member's store, the
//! auth recheck and the header. The API authorizes the caller first and
//! hands the answer on.

use crate::auth::Caller;
use crate::error::RequestError;
use crate::member::core::Member;
use crate::proto::convert;
use crate::proto::etcdserverpb as pb;

/// etcd's `isTxnSerializable`: every range of both branches serializable.
fn txn_is_serializable(request: &pb::TxnRequest) -> bool {
    use pb::request_op::Request;
    request
        .success
        .iter()
        .chain(&request.failure)
        .all(|op| matches!(&op.request, Some(Request::RequestRange(range)) if range.serializable))
}

impl Member {
    /// etcd's Range, for `caller`, whom the API has authorized: without
    /// raft or the WAL, after a ReadIndex round unless serializable.
    pub async fn range(&self, request: pb::RangeRequest, caller: &Caller) -> Result<pb::RangeResponse, RequestError> {
        if request.key.is_empty() {
            return Err(mvcc::Error::EmptyKey.into());
        }
        if !request.serializable && self.membership.local_is_learner() {
            return Err(RequestError::NotSupportedForLearner);
        }
        if !request.serializable && !crate::broken::stale_read() {
            self.linearize().await?;
        }
        let response = self.read_range_bounded(convert::range_request(request))?;
        // As etcd: a read checked at an auth revision that changed while
        // it ran is not answered.
        self.still_authorized(caller)?;
        crate::metrics::metrics().mvcc.range_total.inc();
        let header = self.header(response.revision);
        Ok(convert::range_response(response, header))
    }

    /// A txn of ranges only (etcd's `isTxnReadonly`), served as etcd
    /// serves one: without raft or the WAL, after a ReadIndex round
    /// unless every range is serializable, from one view of this
    /// member's store.
    pub async fn read_txn(&self, request: pb::TxnRequest, caller: &Caller) -> Result<pb::TxnResponse, RequestError> {
        let serializable = txn_is_serializable(&request);
        let checked = convert::txn_request(request)?;
        mvcc::validate::check_txn(&checked, self.config.max_txn_ops)?;
        if !serializable && !crate::broken::stale_read() {
            self.linearize().await?;
        }
        let response = self.store.read_txn(&checked)?;
        self.still_authorized(caller)?;
        let header = self.header(response.revision);
        Ok(convert::txn_response(response, header))
    }

    /// One read of this member's store as it stands, without a ReadIndex
    /// round or an auth recheck: a chunk of a RangeStream
    /// (`api/range_stream.rs`), which waits for the round once before its
    /// first chunk and rechecks auth once after its last.
    pub fn read_range(&self, request: &mvcc::RangeRequest) -> Result<mvcc::RangeResponse, RequestError> {
        Ok(self.store.range(request)?)
    }

    /// [`Member::read_range`] of an answer that is sent whole, bounded
    /// by etcd's send limit with room for this member's header; its
    /// revision is the store's when the range starts (a write since may
    /// change the header by a byte). A refusal names the size etcd would.
    pub fn read_range_bounded(&self, mut request: mvcc::RangeRequest) -> Result<mvcc::RangeResponse, RequestError> {
        let header = self.header(self.store.current_revision());
        request.answer_bytes_max = convert::answer_bound(header.as_ref());
        self.store
            .range(&request)
            .map_err(|error| convert::sized_refusal(error, header.as_ref()).into())
    }
}
