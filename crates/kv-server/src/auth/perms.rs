//! Key permissions as intervals, and whether they cover a request's key
//! or range, with etcd's conventions: a permission with an empty range
//! end grants its key alone, one ending in `\0` every key from its key on,
//! and any other `[key, range_end)`. A range request is permitted only if
//! the union of the user's permissions covers all of it, as etcd's range
//! permission cache decides.

use crate::proto::authpb::{permission::Type, Permission};

/// What a request does to keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    fn granted_by(self, kind: i32) -> bool {
        match Type::try_from(kind) {
            Ok(Type::Readwrite) => true,
            Ok(Type::Read) => self == Access::Read,
            Ok(Type::Write) => self == Access::Write,
            Err(_) => false,
        }
    }
}

/// Half-open intervals `[begin, end)`; `None` as an end is unbounded.
pub struct Intervals(Vec<(Vec<u8>, Option<Vec<u8>>)>);

/// The interval etcd means by `key` and `range_end`.
fn interval(key: &[u8], range_end: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    match range_end {
        [] => {
            let mut next = key.to_vec();
            next.push(0);
            (key.to_vec(), Some(next))
        }
        [0] => (key.to_vec(), None),
        end => (key.to_vec(), Some(end.to_vec())),
    }
}

impl Intervals {
    /// The intervals `permissions` grant for `access`, sorted by start.
    pub fn granting<'a>(permissions: impl Iterator<Item = &'a Permission>, access: Access) -> Intervals {
        let mut intervals: Vec<_> = permissions
            .filter(|p| access.granted_by(p.perm_type))
            .map(|p| interval(&p.key, &p.range_end))
            .collect();
        intervals.sort();
        Intervals(intervals)
    }

    /// Whether the intervals together cover all of `[key, range_end)`.
    pub fn covers(&self, key: &[u8], range_end: &[u8]) -> bool {
        let (begin, end) = interval(key, range_end);
        // How far from `begin` the intervals reach without a gap.
        let mut reached: Option<Vec<u8>> = Some(begin);
        for (start, stop) in &self.0 {
            let Some(at) = &reached else { return true };
            if start > at {
                break;
            }
            match stop {
                None => reached = None,
                Some(stop) if stop > at => reached = Some(stop.clone()),
                Some(_) => {}
            }
        }
        match (reached, end) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(at), Some(end)) => at >= end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permission(key: &[u8], range_end: &[u8], kind: Type) -> Permission {
        Permission {
            perm_type: kind as i32,
            key: key.to_vec(),
            range_end: range_end.to_vec(),
        }
    }

    // Goal: adjacent grants join into one cover, a gap breaks it, and an
    // open-ended grant covers everything after its key.
    #[test]
    fn adjacent_grants_cover_a_range_and_gaps_do_not() {
        let grants = [
            permission(b"a", b"c", Type::Read),
            permission(b"c", b"e", Type::Readwrite),
            permission(b"g", b"", Type::Read),
            permission(b"x", b"\0", Type::Write),
        ];
        let read = Intervals::granting(grants.iter(), Access::Read);
        assert!(read.covers(b"a", b"e"));
        assert!(read.covers(b"b", b""));
        assert!(read.covers(b"g", b""));
        assert!(!read.covers(b"a", b"f"));
        assert!(!read.covers(b"ga", b""));
        let write = Intervals::granting(grants.iter(), Access::Write);
        assert!(write.covers(b"c", b"e"));
        assert!(!write.covers(b"a", b""));
        assert!(write.covers(b"y", b"\0"));
        assert!(write.covers(b"x", b"z"));
        assert!(!write.covers(b"w", b"\0"));
    }
}
