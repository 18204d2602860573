//! What each request of a run is: puts, ranges or txn-puts, generated in
//! order as etcd's benchmark tool generates them (`keys.rs`).

use etcd_proto::etcdserverpb as pb;

use crate::keys::{KeyBuffer, Rng};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutSpec {
    pub total: u64,
    pub key_size: usize,
    pub val_size: usize,
    pub sequential_keys: bool,
    pub key_space_size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSpec {
    pub total: u64,
    pub key: Vec<u8>,
    /// Empty for the single key.
    pub end: Vec<u8>,
    pub serializable: bool,
    pub limit: i64,
    pub count_only: bool,
    /// Answers must count exactly this many keys, or count as errors.
    pub expect_count: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnPutSpec {
    pub total: u64,
    pub key_size: usize,
    pub val_size: usize,
    pub txn_ops: u64,
    pub key_space_size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    Put(PutSpec),
    Range(RangeSpec),
    TxnPut(TxnPutSpec),
}

/// One request to send.
#[derive(Debug, Clone)]
pub enum Request {
    Put(pb::PutRequest),
    /// A range, and the key count its answer must have, if checked.
    Range(pb::RangeRequest, Option<i64>),
    Txn(pb::TxnRequest),
}

impl Workload {
    pub fn total(&self) -> u64 {
        match self {
            Workload::Put(spec) => spec.total,
            Workload::Range(spec) => spec.total,
            Workload::TxnPut(spec) => spec.total,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Workload::Put(_) => "put",
            Workload::Range(spec) if spec.serializable => "range-s",
            Workload::Range(_) => "range-l",
            Workload::TxnPut(_) => "txn-put",
        }
    }

    /// The generator of this workload's requests, in order.
    pub fn requests(&self) -> Result<Requests, String> {
        let mut rng = Rng::from_clock();
        let (keys, value) = match self {
            Workload::Put(spec) => (
                Some(KeyBuffer::new(spec.key_size, spec.key_space_size)?),
                rng.bytes(spec.val_size),
            ),
            Workload::TxnPut(spec) => {
                if spec.txn_ops == 0 {
                    return Err("--txn-ops must be at least 1".into());
                }
                (
                    Some(KeyBuffer::new(spec.key_size, spec.key_space_size)?),
                    rng.bytes(spec.val_size),
                )
            }
            Workload::Range(_) => (None, Vec::new()),
        };
        Ok(Requests {
            workload: self.clone(),
            next: 0,
            keys,
            value,
            rng,
        })
    }
}

/// Yields a run's requests one by one, `total` of them.
pub struct Requests {
    workload: Workload,
    next: u64,
    keys: Option<KeyBuffer>,
    value: Vec<u8>,
    rng: Rng,
}

impl Iterator for Requests {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let i = self.next;
        if i >= self.workload.total() {
            return None;
        }
        self.next += 1;
        let keys = self.keys.as_mut();
        Some(match &self.workload {
            Workload::Put(spec) => {
                let number = if spec.sequential_keys {
                    i % spec.key_space_size
                } else {
                    self.rng.below(spec.key_space_size)
                };
                Request::Put(pb::PutRequest {
                    key: keys.expect("puts have keys").key(number),
                    value: self.value.clone(),
                    ..Default::default()
                })
            }
            Workload::Range(spec) => Request::Range(
                pb::RangeRequest {
                    key: spec.key.clone(),
                    range_end: spec.end.clone(),
                    serializable: spec.serializable,
                    limit: spec.limit,
                    count_only: spec.count_only,
                    ..Default::default()
                },
                spec.expect_count,
            ),
            Workload::TxnPut(spec) => {
                let keys = keys.expect("txn-puts have keys");
                let success = (0..spec.txn_ops)
                    .map(|j| pb::RequestOp {
                        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
                            key: keys.key((i * spec.txn_ops + j) % spec.key_space_size),
                            value: self.value.clone(),
                            ..Default::default()
                        })),
                    })
                    .collect();
                Request::Txn(pb::TxnRequest {
                    success,
                    ..Default::default()
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_keys(workload: &Workload) -> Vec<Vec<u8>> {
        workload
            .requests()
            .unwrap()
            .map(|request| match request {
                Request::Put(put) => put.key,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    // Goal: a put run's keys are etcd's tool's: sequential numbers modulo
    // the key space, varint-written into the reused buffer, and random
    // ones inside the key space; one value for the whole run.
    #[test]
    fn put_keys_follow_etcd() {
        let sequential = Workload::Put(PutSpec {
            total: 5,
            key_size: 4,
            val_size: 16,
            sequential_keys: true,
            key_space_size: 3,
        });
        assert_eq!(
            put_keys(&sequential),
            vec![
                vec![0, 0, 0, 0],
                vec![2, 0, 0, 0],
                vec![4, 0, 0, 0],
                vec![0, 0, 0, 0],
                vec![2, 0, 0, 0]
            ]
        );
        let values: Vec<Vec<u8>> = sequential
            .requests()
            .unwrap()
            .map(|request| match request {
                Request::Put(put) => put.value,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(values.iter().all(|v| v.len() == 16 && *v == values[0]));

        // etcd's defaults: key space 1, so every put hits the same key.
        let default = Workload::Put(PutSpec {
            total: 3,
            key_size: 8,
            val_size: 8,
            sequential_keys: false,
            key_space_size: 1,
        });
        assert_eq!(put_keys(&default), vec![vec![0u8; 8]; 3]);

        let random = Workload::Put(PutSpec {
            total: 1000,
            key_size: 8,
            val_size: 8,
            sequential_keys: false,
            key_space_size: 50,
        });
        let valid: std::collections::BTreeSet<Vec<u8>> = {
            let mut buffer = KeyBuffer::new(8, 50).unwrap();
            (0..50).map(|n| buffer.key(n)).collect()
        };
        assert!(put_keys(&random).iter().all(|k| valid.contains(k)));
    }

    // Goal: txn-put numbers keys `(i * ops + j) % space`, as etcd's does.
    #[test]
    fn txn_put_keys_follow_etcd() {
        let workload = Workload::TxnPut(TxnPutSpec {
            total: 2,
            key_size: 2,
            val_size: 1,
            txn_ops: 3,
            key_space_size: 4,
        });
        let keys: Vec<Vec<Vec<u8>>> = workload
            .requests()
            .unwrap()
            .map(|request| match request {
                Request::Txn(txn) => txn
                    .success
                    .into_iter()
                    .map(|op| match op.request {
                        Some(pb::request_op::Request::RequestPut(put)) => put.key,
                        other => panic!("{other:?}"),
                    })
                    .collect(),
                other => panic!("{other:?}"),
            })
            .collect();
        // Numbers 0,1,2 then 3,0,1.
        assert_eq!(
            keys,
            vec![
                vec![vec![0, 0], vec![2, 0], vec![4, 0]],
                vec![vec![6, 0], vec![0, 0], vec![2, 0]]
            ]
        );
    }
}
