//! Which of a stream's watchers an event concerns, without asking each.
//!
//! Watchers of the same key or range with the same filters and `prev_kv`
//! form one group (etcd's watcher groups), matched once per event for all
//! of them. Groups of one key are found by a hash lookup; groups of a
//! range by an interval tree (etcd's `adt.IntervalTree`): the ranges sorted
//! by start, read as a balanced tree (each middle element the root of its
//! slice), each node knowing the largest end below it. A key's query
//! skips every subtree whose ends all lie at or before the key and every
//! right subtree whose starts lie after it, so matching an event costs
//! O((1 + matches) · log groups), not O(watchers).
//!
//! The tree is rebuilt, in O(n log n), on the first query after a range
//! group was added or removed: creates come in bursts (a client opening
//! its watchers), and each burst is paid for once.
//!
//! # Invariant
//! - every watcher id is in exactly one group; a group has at least one
//!   watcher, and is in `by_shape` and in `keys` (a key alone) or in
//!   `ranges` (a range) exactly once;
//! - when `tree_stale` is false, `tree` holds exactly the range groups.
//!
//! The tests assert it after every step.

use std::collections::HashMap;

use crate::watch::watcher::Shape;

/// The range's end of `shape`: `None` for every key from its key on.
fn end_of(shape: &Shape) -> Option<&[u8]> {
    (shape.range_end != [0]).then_some(shape.range_end.as_slice())
}

pub struct Group {
    pub shape: Shape,
    /// The ids of its watchers, in the order they joined.
    pub watchers: Vec<i64>,
}

/// A range group in the tree: its start, end (`None`: no end) and id.
struct Interval {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    group: usize,
}

#[derive(Default)]
pub struct Matcher {
    /// Groups by id; `None` marks a free id.
    groups: Vec<Option<Group>>,
    free: Vec<usize>,
    by_shape: HashMap<Shape, usize>,
    /// Groups of one key, by key.
    keys: HashMap<Vec<u8>, Vec<usize>>,
    /// Groups of a range.
    ranges: Vec<usize>,
    tree: Vec<Interval>,
    /// The largest end in each node's slice of `tree` (see the module
    /// docs), `None` for no end.
    tree_max_end: Vec<Option<Vec<u8>>>,
    tree_stale: bool,
}

impl Matcher {
    /// Adds watcher `id`, of `shape`, to its group, making the group if it
    /// is the first.
    pub fn add(&mut self, id: i64, shape: &Shape) {
        if let Some(&group) = self.by_shape.get(shape) {
            self.groups[group]
                .as_mut()
                .expect("listed groups exist")
                .watchers
                .push(id);
            return;
        }
        let group = self.free.pop().unwrap_or_else(|| {
            self.groups.push(None);
            self.groups.len() - 1
        });
        if shape.range_end.is_empty() {
            self.keys.entry(shape.key.clone()).or_default().push(group);
        } else {
            self.ranges.push(group);
            self.tree_stale = true;
        }
        self.by_shape.insert(shape.clone(), group);
        self.groups[group] = Some(Group {
            shape: shape.clone(),
            watchers: vec![id],
        });
    }

    /// Removes watcher `id`, of `shape`, and its group if it was the last.
    pub fn remove(&mut self, id: i64, shape: &Shape) {
        let Some(&group) = self.by_shape.get(shape) else {
            return;
        };
        let members = &mut self.groups[group].as_mut().expect("listed groups exist").watchers;
        members.retain(|member| *member != id);
        if !members.is_empty() {
            return;
        }
        self.groups[group] = None;
        self.free.push(group);
        self.by_shape.remove(shape);
        if shape.range_end.is_empty() {
            let same_key = self.keys.get_mut(&shape.key).expect("listed by key");
            same_key.retain(|other| *other != group);
            if same_key.is_empty() {
                self.keys.remove(&shape.key);
            }
        } else {
            self.ranges.retain(|other| *other != group);
            self.tree_stale = true;
        }
    }

    pub fn group(&self, group: usize) -> &Group {
        self.groups[group].as_ref().expect("a matched group exists")
    }

    /// Appends to `out` the groups whose key or range holds `key`.
    pub fn matching(&mut self, key: &[u8], out: &mut Vec<usize>) {
        if let Some(groups) = self.keys.get(key) {
            out.extend_from_slice(groups);
        }
        if self.ranges.is_empty() {
            return;
        }
        if self.tree_stale {
            self.rebuild();
        }
        self.stab(0, self.tree.len(), key, out);
    }

    fn rebuild(&mut self) {
        let mut tree: Vec<Interval> = self
            .ranges
            .iter()
            .map(|&group| {
                let shape = &self.groups[group].as_ref().expect("listed groups exist").shape;
                Interval {
                    start: shape.key.clone(),
                    end: end_of(shape).map(<[u8]>::to_vec),
                    group,
                }
            })
            .collect();
        tree.sort_by(|a, b| a.start.cmp(&b.start));
        self.tree_max_end = vec![None; tree.len()];
        self.tree = tree;
        self.fill_max_end(0, self.tree.len());
        self.tree_stale = false;
    }

    /// Sets the largest end of the slice `lo..hi` at its middle, and of
    /// every slice below; returns it.
    fn fill_max_end(&mut self, lo: usize, hi: usize) -> Option<Vec<u8>> {
        if lo >= hi {
            return Some(Vec::new());
        }
        let mid = lo + (hi - lo) / 2;
        let left = self.fill_max_end(lo, mid);
        let right = self.fill_max_end(mid + 1, hi);
        let max = [left, right, self.tree[mid].end.clone()]
            .into_iter()
            .max_by(|a, b| later_end(a.as_deref(), b.as_deref()))
            .expect("three candidates");
        self.tree_max_end[mid] = max.clone();
        max
    }

    fn stab(&self, lo: usize, hi: usize, key: &[u8], out: &mut Vec<usize>) {
        if lo >= hi {
            return;
        }
        let mid = lo + (hi - lo) / 2;
        if let Some(max) = &self.tree_max_end[mid] {
            if max.as_slice() <= key {
                return;
            }
        }
        self.stab(lo, mid, key, out);
        let node = &self.tree[mid];
        if node.start.as_slice() > key {
            return;
        }
        if node.end.as_deref().is_none_or(|end| key < end) {
            out.push(node.group);
        }
        self.stab(mid + 1, hi, key, out);
    }

    /// Asserts the invariant in the module docs.
    #[cfg(test)]
    pub fn check(&self) {
        let mut seen = std::collections::HashSet::new();
        for (group, slot) in self.groups.iter().enumerate() {
            let Some(g) = slot else {
                assert!(self.free.contains(&group));
                continue;
            };
            assert!(!g.watchers.is_empty());
            assert!(g.watchers.iter().all(|id| seen.insert(*id)), "a watcher in one group");
            assert_eq!(self.by_shape.get(&g.shape), Some(&group));
            let by_key = self
                .keys
                .get(&g.shape.key)
                .map_or(0, |l| l.iter().filter(|x| **x == group).count());
            let by_range = self.ranges.iter().filter(|x| **x == group).count();
            let expected = if g.shape.range_end.is_empty() { (1, 0) } else { (0, 1) };
            assert_eq!((by_key, by_range), expected);
        }
        assert_eq!(self.by_shape.len(), self.groups.iter().flatten().count());
        if !self.tree_stale {
            let mut in_tree: Vec<usize> = self.tree.iter().map(|i| i.group).collect();
            let mut ranges = self.ranges.clone();
            in_tree.sort_unstable();
            ranges.sort_unstable();
            assert_eq!(in_tree, ranges);
        }
    }
}

/// Orders ends, `None` (no end) last.
fn later_end(a: Option<&[u8]>, b: Option<&[u8]>) -> std::cmp::Ordering {
    match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(_), None) => std::cmp::Ordering::Less,
        (Some(a), Some(b)) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shape(key: &[u8], range_end: &[u8], no_put: bool) -> Shape {
        Shape {
            key: key.to_vec(),
            range_end: range_end.to_vec(),
            no_put,
            no_delete: false,
            prev_kv: false,
        }
    }

    /// The watchers a brute-force scan finds for `key`.
    fn scanned(watchers: &HashMap<i64, Shape>, key: &[u8]) -> Vec<i64> {
        let event = mvcc::Event {
            kind: mvcc::EventKind::Delete,
            kv: mvcc::KeyValue {
                key: key.to_vec(),
                ..Default::default()
            },
        };
        let mut ids: Vec<i64> = watchers
            .iter()
            .filter(|(_, w)| w.wants(&event))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    fn matched(matcher: &mut Matcher, key: &[u8]) -> Vec<i64> {
        let mut groups = Vec::new();
        matcher.matching(key, &mut groups);
        let mut ids: Vec<i64> = groups.iter().flat_map(|g| matcher.group(*g).watchers.clone()).collect();
        ids.sort_unstable();
        ids
    }

    fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0u8..4, 0..3)
    }

    proptest! {
        // Goal: after any sequence of adds and removes of watchers of
        // keys, ranges and open-ended ranges, the groups matched for any
        // key hold exactly the watchers a scan of every watcher finds, and
        // the invariant holds.
        #[test]
        fn matches_equal_a_scan(
            steps in prop::collection::vec((any::<bool>(), 0i64..24, key_strategy(), 0u8..4, key_strategy()), 1..80),
            probes in prop::collection::vec(key_strategy(), 1..12),
        ) {
            let mut matcher = Matcher::default();
            let mut watchers: HashMap<i64, Shape> = HashMap::new();
            for (add, id, key, kind, end) in steps {
                if add && !watchers.contains_key(&id) {
                    let key = if key.is_empty() { vec![0] } else { key };
                    let range_end = match kind {
                        0 => Vec::new(),
                        1 => vec![0],
                        _ if end > key => end,
                        _ => Vec::new(),
                    };
                    let w = shape(&key, &range_end, false);
                    matcher.add(id, &w);
                    watchers.insert(id, w);
                } else if let Some(w) = watchers.remove(&id) {
                    matcher.remove(id, &w);
                }
                matcher.check();
                for probe in &probes {
                    prop_assert_eq!(matched(&mut matcher, probe), scanned(&watchers, probe));
                }
                matcher.check();
            }
        }
    }

    // Goal: watchers of one key with the same filters share a group, and
    // different filters make another.
    #[test]
    fn same_shapes_share_a_group() {
        let mut matcher = Matcher::default();
        matcher.add(1, &shape(b"k", b"", false));
        matcher.add(2, &shape(b"k", b"", false));
        matcher.add(3, &shape(b"k", b"", true));
        let mut groups = Vec::new();
        matcher.matching(b"k", &mut groups);
        assert_eq!(groups.len(), 2);
        let sizes: Vec<usize> = groups.iter().map(|g| matcher.group(*g).watchers.len()).collect();
        assert_eq!(sizes, [2, 1]);
        matcher.check();
    }
}
