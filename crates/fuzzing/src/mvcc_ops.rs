//! Fuzz target: the MVCC store against its reference model
//! (`mvcc_reference::model`), on arbitrary batches of writes and reads.
//!
//! Opening a store per input would cost milliseconds, so one store lives
//! per thread and each input works in a key space of its own: keys are
//! prefixed with the input's number, "from key on" range ends stop at the
//! prefix's end, leases are numbered per input, and read revisions and
//! compactions are taken relative to where the store stood when the input
//! began. The model starts from that revision and compact revision, so
//! every answer and every event must be the model's. The store is
//! replaced every [`INPUTS_PER_STORE`] inputs.

use std::cell::RefCell;

use arbitrary::{Arbitrary, Result, Unstructured};
use mvcc::*;
use mvcc_reference::model::Model;

/// Inputs one store serves before a fresh one replaces it: bounds its
/// size (and so the cost of its compactions' hashes) in a long run.
pub const INPUTS_PER_STORE: u64 = 2000;
/// Steps per input, at most.
const STEPS_MAX: usize = 16;
const KEYS: &[&[u8]] = &[b"a", b"ab", b"b", b"b/1", b"b/2", b"c"];

struct State {
    _dir: tempfile::TempDir,
    store: Store,
    raft_index: u64,
    inputs: u64,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

#[derive(Debug, Arbitrary)]
enum Step {
    Apply(Vec<Write>),
    Range(Range),
}

#[derive(Debug, Arbitrary)]
enum Write {
    Put {
        key: u8,
        value: u8,
        lease: u8,
        flags: u8,
    },
    Delete {
        key: u8,
        end: u8,
        prev_kv: bool,
    },
    Txn {
        compare_key: u8,
        version: i8,
        success: Vec<Write>,
        failure: Vec<Write>,
    },
    Compact {
        back: u8,
    },
    Grant {
        lease: u8,
        ttl: i64,
    },
    Revoke {
        lease: u8,
    },
}

#[derive(Debug, Arbitrary)]
struct Range {
    key: u8,
    end: u8,
    limit: i8,
    revision: i8,
    flags: u8,
}

/// One input's key space and numbering.
struct Space {
    prefix: Vec<u8>,
    start: i64,
    lease_base: i64,
}

impl Space {
    fn key(&self, choice: u8) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(KEYS[choice as usize % KEYS.len()]);
        key
    }

    /// An end for a range from a key: none, "from the key on" (the
    /// prefix's end), or one of the keys.
    fn end(&self, choice: u8) -> Vec<u8> {
        match choice % 4 {
            0 | 1 => Vec::new(),
            2 => {
                let mut end = self.prefix.clone();
                *end.last_mut().expect("a non-empty prefix") += 1;
                end
            }
            _ => self.key(choice / 4),
        }
    }

    fn lease(&self, choice: u8) -> i64 {
        match choice % 4 {
            0 => 0,
            n => self.lease_base + n as i64,
        }
    }

    fn write(&self, write: Write, current: i64, depth: u32) -> WriteRequest {
        match write {
            Write::Put {
                key,
                value,
                lease,
                flags,
            } => WriteRequest::Put(PutRequest {
                key: self.key(key),
                value: if flags & 2 != 0 { Vec::new() } else { vec![b'v', value] },
                lease: if flags & 4 != 0 { 0 } else { self.lease(lease) },
                prev_kv: flags & 1 != 0,
                ignore_value: flags & 2 != 0,
                ignore_lease: flags & 4 != 0,
            }),
            Write::Delete { key, end, prev_kv } => WriteRequest::DeleteRange(DeleteRangeRequest {
                key: self.key(key),
                range_end: self.end(end),
                prev_kv,
            }),
            Write::Txn {
                compare_key,
                version,
                success,
                failure,
            } => WriteRequest::Txn(self.txn(compare_key, version, success, failure, current, depth)),
            Write::Compact { back } => WriteRequest::Compaction(CompactionRequest {
                revision: current - i64::from(back % 8),
            }),
            Write::Grant { lease, ttl } => WriteRequest::LeaseGrant(LeaseGrantRequest {
                id: self.lease(lease),
                ttl,
            }),
            Write::Revoke { lease } => WriteRequest::LeaseRevoke(LeaseRevokeRequest { id: self.lease(lease) }),
        }
    }

    fn txn(
        &self,
        key: u8,
        version: i8,
        success: Vec<Write>,
        failure: Vec<Write>,
        current: i64,
        depth: u32,
    ) -> TxnRequest {
        let op = |write: Write| match self.write(write, current, depth + 1) {
            WriteRequest::Put(put) => Some(RequestOp::Put(put)),
            WriteRequest::DeleteRange(delete) => Some(RequestOp::DeleteRange(delete)),
            WriteRequest::Txn(txn) if depth < 2 => Some(RequestOp::Txn(txn)),
            _ => None,
        };
        TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal,
                target: CompareTarget::Version(i64::from(version % 3)),
                key: self.key(key),
                range_end: Vec::new(),
            }],
            success: success.into_iter().take(4).filter_map(op).collect(),
            failure: failure.into_iter().take(4).filter_map(op).collect(),
        }
    }

    fn range(&self, range: Range) -> RangeRequest {
        let revision = match range.revision {
            0 => 0,
            n if n < 0 => i64::from(n),
            n => self.start + i64::from(n % 16),
        };
        RangeRequest {
            key: self.key(range.key),
            range_end: self.end(range.end),
            limit: i64::from(range.limit.max(0) % 4),
            revision,
            sort_order: [SortOrder::None, SortOrder::Ascend, SortOrder::Descend][range.flags as usize % 3],
            sort_target: [SortTarget::Key, SortTarget::Version, SortTarget::Mod, SortTarget::Value]
                [(range.flags / 3) as usize % 4],
            keys_only: range.flags & 0x40 != 0,
            count_only: range.flags & 0x80 != 0,
            ..RangeRequest::default()
        }
    }
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    STATE.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|state| state.inputs >= INPUTS_PER_STORE) {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store = Store::open(dir.path()).expect("a fresh store opens");
            *cell = Some(State {
                _dir: dir,
                store,
                raft_index: 0,
                inputs: 0,
            });
        }
        let state = cell.as_mut().expect("just made");
        state.inputs += 1;
        let _ = check(&mut Unstructured::new(data), state);
    });
}

fn check(input: &mut Unstructured, state: &mut State) -> Result<()> {
    let start = state.store.current_revision();
    let space = Space {
        prefix: format!("{}/", state.inputs).into_bytes(),
        start,
        lease_base: state.inputs as i64 * 8,
    };
    let mut model = Model::starting_at(start, state.store.compact_revision());
    let steps: Vec<Step> = input.arbitrary_iter()?.take(STEPS_MAX).collect::<Result<_>>()?;
    for step in steps {
        match step {
            Step::Apply(writes) => {
                let requests: Vec<WriteRequest> = writes
                    .into_iter()
                    .take(4)
                    .map(|write| space.write(write, model.current, 0))
                    .collect();
                state.raft_index += 1;
                let applied = state
                    .store
                    .apply(state.raft_index, &requests)
                    .expect("the store applies");
                for (request, got) in requests.iter().zip(applied) {
                    assert_eq!(got, model.apply(request), "{request:?}");
                }
            }
            Step::Range(range) => {
                let request = space.range(range);
                assert_eq!(
                    state.store.range(&request),
                    model.range(&request, model.current),
                    "{request:?}"
                );
            }
        }
        assert_eq!(state.store.current_revision(), model.current);
    }
    Ok(())
}
