//! Revisions and their byte layout.
//!
//! A revision is `{main, sub}`: `main` is the store revision a write
//! request created, `sub` numbers the changes inside it from 0. Every key
//! changed by one request shares its `main`.
//!
//! On disk a revision is the key of the `k` space (see the crate docs):
//!
//! ```text
//! byte  0..8   main, u64 big-endian
//! byte  8      '_'
//! byte  9..17  sub, u64 big-endian
//! byte  17     't' only for a tombstone (a deletion); absent otherwise
//! ```
//!
//! Big-endian numbers make byte order equal revision order, so a scan of
//! the space visits revisions in order.

/// Bytes of an encoded revision without the tombstone mark.
pub const REVISION_BYTES: usize = 17;
/// The mark that follows a tombstone's revision bytes.
pub const TOMBSTONE_MARK: u8 = b't';

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
}

impl Revision {
    pub const fn new(main: i64, sub: i64) -> Revision {
        Revision { main, sub }
    }

    /// The revision's bytes, with the tombstone mark when `tombstone`.
    pub fn to_bytes(self, tombstone: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(REVISION_BYTES + 1);
        out.extend_from_slice(&(self.main as u64).to_be_bytes());
        out.push(b'_');
        out.extend_from_slice(&(self.sub as u64).to_be_bytes());
        if tombstone {
            out.push(TOMBSTONE_MARK);
        }
        out
    }

    /// Parses revision bytes; returns the revision and whether it marks a
    /// tombstone, or `None` for bytes of another shape.
    pub fn from_bytes(bytes: &[u8]) -> Option<(Revision, bool)> {
        let tombstone = match bytes.len() {
            REVISION_BYTES => false,
            n if n == REVISION_BYTES + 1 && bytes[REVISION_BYTES] == TOMBSTONE_MARK => true,
            _ => return None,
        };
        if bytes[8] != b'_' {
            return None;
        }
        let main = u64::from_be_bytes(bytes[0..8].try_into().ok()?) as i64;
        let sub = u64::from_be_bytes(bytes[9..17].try_into().ok()?) as i64;
        Some((Revision { main, sub }, tombstone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: bytes round-trip and sort in revision order.
    #[test]
    fn bytes_round_trip_and_sort_in_order() {
        let revisions = [
            Revision::new(1, 0),
            Revision::new(2, 0),
            Revision::new(2, 1),
            Revision::new(256, 0),
        ];
        for pair in revisions.windows(2) {
            assert!(pair[0].to_bytes(false) < pair[1].to_bytes(false));
            assert!(pair[0].to_bytes(true) < pair[1].to_bytes(false));
        }
        for revision in revisions {
            assert_eq!(Revision::from_bytes(&revision.to_bytes(false)), Some((revision, false)));
            assert_eq!(Revision::from_bytes(&revision.to_bytes(true)), Some((revision, true)));
        }
        assert_eq!(Revision::from_bytes(b"short"), None);
        let mut bad = Revision::new(1, 1).to_bytes(true);
        bad[17] = b'x';
        assert_eq!(Revision::from_bytes(&bad), None);
    }
}
