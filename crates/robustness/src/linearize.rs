//! The linearizability checker: is there an order of one key's operations
//! that respects real time (an operation that returned before another was
//! called comes first) and in which every operation returns what it did
//! under etcd's semantics (`model.rs`)?
//!
//! The search is Wing and Gong's, with the memoization that porcupine and
//! Lowe's checkers add: from the operations not yet placed, any one called
//! before the earliest of their returns may go next; a (placed set, key
//! state) pair found to lead nowhere is remembered and never searched
//! again. An operation with unknown outcome never returns, so it can go
//! next at any point after its call, or last, where it changes nothing
//! anyone saw. A search that runs past its step budget gives up and says
//! so: that is not a violation.
//!
//! A history that is not linearizable is shrunk to a small failing
//! sub-history (operations are dropped one by one while it still fails),
//! which `timeline.rs` draws.

use std::collections::HashSet;

use crate::history::{History, Operation};
use crate::model::{step, KeyState};

/// Steps one key's search may take before giving up. A round's key has a
/// few hundred operations at most; real histories are decided in far
/// fewer steps, and the budget stops a pathological one from stalling a
/// run (it is then reported as undecided, not as a violation).
pub const SEARCH_STEPS_MAX: u64 = 2_000_000;

/// Steps each shrinking attempt may take: a sub-history whose search runs
/// past it keeps the operation it tried to drop.
pub const SHRINK_STEPS_MAX: u64 = 20_000;

/// How long shrinking one failing key may take in all; what is left then
/// is reported as is.
pub const SHRINK_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Share of a run's histories, in percent, that may hold an undecided
/// key before the run fails. No recorded run has had one (the searches end
/// in far fewer steps than [`SEARCH_STEPS_MAX`]); a checker that gave up
/// on many histories would pass them unchecked, so more than one in a
/// hundred fails the run.
pub const UNDECIDED_HISTORIES_PERCENT_MAX: u64 = 1;

/// Whether `undecided` histories with an undecided key, out of
/// `histories`, are more than [`UNDECIDED_HISTORIES_PERCENT_MAX`] allows.
pub fn too_many_undecided(undecided: u64, histories: u64) -> bool {
    undecided * 100 > histories * UNDECIDED_HISTORIES_PERCENT_MAX
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// No valid order exists; the operations of a small sub-history that
    /// still has none.
    Violation(Vec<Operation>),
    /// The search ran out of steps.
    Undecided,
}

/// The verdict for each key of `history`.
pub fn check(history: &History) -> Vec<(String, Verdict)> {
    history
        .by_key()
        .into_iter()
        .map(|(key, operations)| (key, check_key(&operations)))
        .collect()
}

/// The verdict for one key's operations.
pub fn check_key(operations: &[Operation]) -> Verdict {
    match linearizable(operations, SEARCH_STEPS_MAX) {
        Some(true) => Verdict::Linearizable,
        Some(false) => Verdict::Violation(shrink(operations)),
        None => Verdict::Undecided,
    }
}

/// Whether a valid order exists: `None` if the search took more than
/// `steps_max` steps.
pub fn linearizable(operations: &[Operation], steps_max: u64) -> Option<bool> {
    let mut operations = operations.to_vec();
    operations.sort_by_key(|op| (op.invoked, op.returned));
    let mut search = Search {
        operations: &operations,
        seen: HashSet::new(),
        steps: 0,
        steps_max,
    };
    let placed = vec![0u64; operations.len().div_ceil(64)];
    search.from(placed, KeyState::default())
}

struct Search<'a> {
    operations: &'a [Operation],
    /// (placed, state) pairs known to lead nowhere.
    seen: HashSet<(Vec<u64>, KeyState)>,
    steps: u64,
    steps_max: u64,
}

fn is_placed(placed: &[u64], index: usize) -> bool {
    placed[index / 64] & (1 << (index % 64)) != 0
}

impl Search<'_> {
    fn from(&mut self, placed: Vec<u64>, state: KeyState) -> Option<bool> {
        let remaining: Vec<usize> = (0..self.operations.len()).filter(|&i| !is_placed(&placed, i)).collect();
        if remaining.iter().all(|&i| self.operations[i].is_unknown()) {
            return Some(true);
        }
        self.steps += 1;
        if self.steps > self.steps_max {
            return None;
        }
        let key = (placed, state);
        if self.seen.contains(&key) {
            return Some(false);
        }
        let (placed, state) = key;
        let earliest_return = remaining
            .iter()
            .map(|&i| self.operations[i].returned)
            .min()
            .unwrap_or(u64::MAX);
        for &index in &remaining {
            let operation = &self.operations[index];
            if operation.invoked > earliest_return {
                break;
            }
            for next in step(&state, operation) {
                let mut after = placed.clone();
                after[index / 64] |= 1 << (index % 64);
                if self.from(after, next)? {
                    return Some(true);
                }
            }
        }
        self.seen.insert((placed, state));
        Some(false)
    }
}

/// A small sub-history of `operations` that is still not linearizable,
/// and whose failure proves the whole history's: first the shortest
/// closed prefix that fails, then reads dropped one at a time, last first,
/// while the rest still fails. A search that runs past
/// [`SHRINK_STEPS_MAX`] keeps what it tried to drop, and shrinking stops
/// after [`SHRINK_WITHIN`].
///
/// Only these cuts keep the proof. A prefix must be closed: it holds every
/// operation called before any of its known operations returned, since
/// such an operation may take effect first (an operation called later
/// takes effect after every one of them). Dropping a read (a get, a
/// failed compare-and-swap, a delete of nothing) only removes a
/// constraint; dropping a write could leave a read of its value with no
/// writer, a failure of the cut and not of the history.
fn shrink(operations: &[Operation]) -> Vec<Operation> {
    let started = std::time::Instant::now();
    let mut kept = operations.to_vec();
    kept.sort_by_key(|op| op.invoked);
    let fails = |ops: &[Operation]| linearizable(ops, SHRINK_STEPS_MAX) == Some(false);
    let mut end = 0;
    while end < kept.len() {
        end = closed_prefix(&kept, end + 1);
        if fails(&kept[..end]) {
            break;
        }
    }
    kept.truncate(end);
    let mut index = kept.len();
    while index > 0 && started.elapsed() < SHRINK_WITHIN {
        index -= 1;
        if !only_reads(&kept[index]) {
            continue;
        }
        let mut without = kept.clone();
        without.remove(index);
        if fails(&without) {
            kept = without;
        }
    }
    kept
}

/// The end of the smallest closed prefix of `sorted` (by call time) that
/// holds its first `end` operations.
fn closed_prefix(sorted: &[Operation], mut end: usize) -> usize {
    loop {
        let horizon = sorted[..end]
            .iter()
            .filter(|op| !op.is_unknown())
            .map(|op| op.returned)
            .max()
            .unwrap_or(0);
        let closed = end + sorted[end..].iter().take_while(|op| op.invoked <= horizon).count();
        if closed == end {
            return end;
        }
        end = closed;
    }
}

/// Whether `operation` changed nothing, as it returned.
fn only_reads(operation: &Operation) -> bool {
    use crate::history::{Call, Return};
    matches!(
        (&operation.call, &operation.result),
        (Call::Get { .. }, _)
            | (Call::Cas { .. }, Return::Cas { succeeded: false, .. })
            | (Call::Delete { .. }, Return::Delete { deleted: 0, .. })
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Call, Return};

    // Goal: a run may leave at most one history in a hundred undecided.
    #[test]
    fn undecided_histories_beyond_the_share_fail_the_run() {
        assert!(!too_many_undecided(0, 3));
        assert!(!too_many_undecided(1, 100));
        assert!(too_many_undecided(2, 100));
        assert!(too_many_undecided(1, 99));
        assert!(too_many_undecided(1, 1));
    }

    fn op(client: usize, invoked: u64, returned: u64, call: Call, result: Return) -> Operation {
        Operation {
            client,
            call,
            invoked,
            returned,
            result,
        }
    }

    fn put(client: usize, at: (u64, u64), value: &str, revision: i64) -> Operation {
        let call = Call::Put {
            key: "k".into(),
            value: value.into(),
            lease: 0,
        };
        op(client, at.0, at.1, call, Return::Put { revision })
    }

    fn get(client: usize, at: (u64, u64), seen: Option<(&str, i64)>) -> Operation {
        let kv = seen.map(|(value, revision)| (value.to_string(), revision));
        op(
            client,
            at.0,
            at.1,
            Call::Get { key: "k".into() },
            Return::Get { revision: 0, kv },
        )
    }

    fn unknown_put(client: usize, invoked: u64, value: &str) -> Operation {
        let call = Call::Put {
            key: "k".into(),
            value: value.into(),
            lease: 0,
        };
        op(client, invoked, u64::MAX, call, Return::Unknown("timed out".into()))
    }

    // Goal: histories that are linearizable pass: sequential ones,
    // concurrent ones whose order is free, and unknown writes seen or not.
    #[test]
    fn linearizable_histories_pass() {
        let cases: Vec<(&str, Vec<Operation>)> = vec![
            (
                "sequential",
                vec![put(0, (0, 10), "a", 2), get(1, (20, 30), Some(("a", 2)))],
            ),
            (
                "a read concurrent with a put sees either",
                vec![
                    put(0, (0, 50), "a", 2),
                    get(1, (10, 20), None),
                    get(2, (15, 40), Some(("a", 2))),
                ],
            ),
            (
                "an unknown put, then seen",
                vec![unknown_put(0, 0, "a"), get(1, (100, 110), Some(("a", 7)))],
            ),
            (
                "an unknown put never seen",
                vec![unknown_put(0, 0, "a"), get(1, (100, 110), None)],
            ),
        ];
        for (name, history) in cases {
            assert_eq!(check_key(&history), Verdict::Linearizable, "{name}");
        }
    }

    // Goal: each planted violation is caught, and shrunk to the operations
    // that show it: writes are never dropped (a read of a value whose write
    // was dropped fails on its own), so the stale read keeps both puts, and
    // the read of a value never written keeps the put before it.
    #[test]
    fn planted_violations_are_caught() {
        let cases: Vec<(&str, Vec<Operation>, usize)> = vec![
            (
                "a stale read: the old value after the new one was acknowledged",
                vec![
                    put(0, (0, 10), "a", 2),
                    put(0, (20, 30), "b", 3),
                    get(1, (40, 50), Some(("a", 2))),
                ],
                3,
            ),
            (
                "a lost write: acknowledged, then gone",
                vec![put(0, (0, 10), "a", 2), get(1, (20, 30), None)],
                2,
            ),
            (
                "a write seen, then unseen",
                vec![
                    put(0, (0, 100), "a", 2),
                    get(1, (10, 20), Some(("a", 2))),
                    get(2, (30, 40), None),
                ],
                3,
            ),
            (
                "a read of a value never written",
                vec![put(0, (0, 10), "a", 2), get(1, (20, 30), Some(("z", 5)))],
                2,
            ),
        ];
        for (name, history, shrunk_to) in cases {
            match check_key(&history) {
                Verdict::Violation(kept) => assert_eq!(kept.len(), shrunk_to, "{name}: {kept:#?}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    // Goal: a compare-and-swap is checked against the mod revision, and a
    // lease revoke deletes the key it holds.
    #[test]
    fn cas_and_revoke_follow_etcd() {
        let cas = |at: (u64, u64), expected: i64, succeeded: bool, revision: i64| {
            let call = Call::Cas {
                key: "k".into(),
                expected,
                value: "c".into(),
            };
            op(3, at.0, at.1, call, Return::Cas { revision, succeeded })
        };
        let good = vec![
            put(0, (0, 10), "a", 2),
            cas((20, 30), 2, true, 5),
            get(1, (40, 50), Some(("c", 5))),
        ];
        assert_eq!(check_key(&good), Verdict::Linearizable);
        let bad = vec![put(0, (0, 10), "a", 2), cas((20, 30), 1, true, 5)];
        assert!(
            matches!(check_key(&bad), Verdict::Violation(_)),
            "succeeded on a wrong mod revision"
        );

        let leased = Operation {
            call: Call::Put {
                key: "k".into(),
                value: "a".into(),
                lease: 9,
            },
            ..put(0, (0, 10), "a", 2)
        };
        let revoke = op(
            1,
            20,
            30,
            Call::LeaseRevoke { id: 9 },
            Return::LeaseRevoke { revision: 4 },
        );
        let after = vec![leased.clone(), revoke.clone(), get(2, (40, 50), None)];
        assert_eq!(check_key(&after), Verdict::Linearizable);
        let kept = vec![leased, revoke, get(2, (40, 50), Some(("a", 2)))];
        assert!(
            matches!(check_key(&kept), Verdict::Violation(_)),
            "the key outlived its lease"
        );
    }
}
