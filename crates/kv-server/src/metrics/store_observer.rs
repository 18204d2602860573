//! The store's observer: every apply and commit timed into etcd's backend
//! and apply metrics, with the slow-apply warning etcd logs.

use super::*;

/// The `op` label of each kind of write the store applies.
pub(super) const APPLY_OPS: [&str; 10] = [
    "Put",
    "DeleteRange",
    "Txn",
    "Compaction",
    "LeaseGrant",
    "LeaseRevoke",
    "Alarm",
    "ClusterMemberAttrSet",
    "Auth",
    "LeaseCheckpoint",
];

pub(super) fn apply_op(request: &mvcc::WriteRequest) -> usize {
    match request {
        mvcc::WriteRequest::Put(_) => 0,
        mvcc::WriteRequest::DeleteRange(_) => 1,
        mvcc::WriteRequest::Txn(_) => 2,
        mvcc::WriteRequest::Compaction(_) => 3,
        mvcc::WriteRequest::LeaseGrant(_) => 4,
        mvcc::WriteRequest::LeaseRevoke(_) => 5,
        mvcc::WriteRequest::Alarm(_) => 6,
        mvcc::WriteRequest::Membership(_) => 7,
        mvcc::WriteRequest::Auth(_) => 8,
        mvcc::WriteRequest::LeaseCheckpoint(_) => 9,
    }
}

/// The ranges, puts and deletes one applied write ran, counted as etcd's
/// store counts them: a txn's by the branch it took, nested txns
/// included, and the txn itself only when it ran more than one op.
#[derive(Default)]
pub(super) struct OpCounts {
    ranges: u64,
    puts: u64,
    deletes: u64,
}

impl OpCounts {
    fn add_txn(&mut self, txn: &mvcc::TxnRequest, answer: &mvcc::TxnResponse) {
        let ops = if answer.succeeded { &txn.success } else { &txn.failure };
        for (op, response) in ops.iter().zip(&answer.responses) {
            match (op, response) {
                (mvcc::RequestOp::Range(_), _) => self.ranges += 1,
                (mvcc::RequestOp::Put(_), _) => self.puts += 1,
                (mvcc::RequestOp::DeleteRange(_), _) => self.deletes += 1,
                (mvcc::RequestOp::Txn(nested), mvcc::ResponseOp::Txn(answer)) => self.add_txn(nested, answer),
                (mvcc::RequestOp::Txn(_), _) => {}
            }
        }
    }

    fn count(&self) {
        let m = &metrics().mvcc;
        if self.ranges + self.puts + self.deletes > 1 {
            m.txn_total.inc();
        }
        m.range_total.inc_by(self.ranges);
        m.put_total.inc_by(self.puts);
        m.delete_total.inc_by(self.deletes);
    }
}

/// etcd's "apply request took too long" line for one applied request:
/// what it was (keys and sizes, values left out, as etcd redacts them)
/// and what came of it.
pub(super) fn slow_apply(
    request: &mvcc::WriteRequest,
    response: &mvcc::Result<mvcc::WriteResponse>,
    took: Duration,
    threshold: Duration,
) {
    use crate::logging::go_duration;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).escape_default().to_string();
    let described = match request {
        mvcc::WriteRequest::Put(put) => format!("put:<key:\"{}\" value_size:{} >", text(&put.key), put.value.len()),
        mvcc::WriteRequest::DeleteRange(delete) => {
            format!(
                "delete_range:<key:\"{}\" range_end:\"{}\" >",
                text(&delete.key),
                text(&delete.range_end)
            )
        }
        mvcc::WriteRequest::Compaction(compaction) => format!("compaction:<revision:{} > ", compaction.revision),
        other => format!("{}:<> ", APPLY_OPS[apply_op(other)].to_ascii_lowercase()),
    };
    match response {
        Ok(answer) => tracing::warn!(
            took = %go_duration(took),
            "expected-duration" = %go_duration(threshold),
            prefix = "",
            request = described,
            response = match answer {
                mvcc::WriteResponse::Put(put) => format!("revision:{}", put.revision),
                mvcc::WriteResponse::DeleteRange(delete) => format!("revision:{}", delete.revision),
                mvcc::WriteResponse::Txn(txn) => format!("revision:{}", txn.revision),
                _ => String::new(),
            },
            "apply request took too long"
        ),
        Err(error) => tracing::warn!(
            took = %go_duration(took),
            "expected-duration" = %go_duration(threshold),
            prefix = "",
            request = described,
            response = "",
            error = %error,
            "apply request took too long"
        ),
    }
}

/// The store's reports, as metrics: each apply's time (and whether it was
/// slow), each batch commit's time, and the puts, deletes, txns and
/// leases it applied. The histogram of each (op, success) pair is looked
/// up once, here, not per apply.
pub struct StoreObserver {
    apply: Vec<[handles::Histogram; 2]>,
}

impl Default for StoreObserver {
    fn default() -> StoreObserver {
        let apply_duration = &metrics().server.apply_duration;
        let apply = APPLY_OPS
            .iter()
            .map(|op| ["false", "true"].map(|success| apply_duration.with_label_values(&["v3", op, success])))
            .collect();
        StoreObserver { apply }
    }
}

impl mvcc::Observer for StoreObserver {
    fn applied(&self, request: &mvcc::WriteRequest, response: &mvcc::Result<mvcc::WriteResponse>, took: Duration) {
        let m = metrics();
        let succeeded = response.is_ok();
        let mut ops = OpCounts::default();
        match (request, response) {
            (mvcc::WriteRequest::Put(_), Ok(_)) => ops.puts += 1,
            (mvcc::WriteRequest::DeleteRange(_), Ok(_)) => ops.deletes += 1,
            (mvcc::WriteRequest::Txn(txn), Ok(mvcc::WriteResponse::Txn(answer))) => ops.add_txn(txn, answer),
            (mvcc::WriteRequest::LeaseGrant(_), Ok(_)) => m.mvcc.lease_granted.inc(),
            _ => {}
        }
        ops.count();
        self.apply[apply_op(request)][usize::from(succeeded)].observe(took.as_secs_f64());
        let threshold = warning_apply_duration();
        if took > threshold {
            m.server.slow_apply.inc();
            slow_apply(request, response, took, threshold);
        }
    }

    fn committed(&self, took: Duration) {
        metrics().disk.backend_commit.observe(took.as_secs_f64());
    }

    fn compaction_step(&self, index: bool, removed: usize, took: Duration) {
        let m = &metrics().mvcc;
        let pause = match index {
            true => &m.index_compaction_pause,
            false => &m.db_compaction_pause,
        };
        pause.observe(took.as_secs_f64() * 1000.0);
        m.db_compaction_keys.inc_by(removed as u64);
    }
}
