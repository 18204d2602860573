//! Key-values, change events, and the value layout stored per revision.
//!
//! A stored value (the value under a revision key in the `k` space):
//!
//! ```text
//! create_revision i64 BE, mod_revision i64 BE, version i64 BE, lease i64 BE,
//! key length u32 BE, key bytes, value bytes (the rest)
//! ```
//!
//! A tombstone stores the same layout with create_revision, version and
//! lease 0 and an empty value: only the key and its deletion revision.

/// A key's state at one revision, as etcd's `mvccpb.KeyValue` has it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyValue {
    pub key: Vec<u8>,
    /// Revision of the put that created this generation of the key.
    pub create_revision: i64,
    /// Revision of the last change.
    pub mod_revision: i64,
    /// 1 on create, +1 per put; a delete ends the generation.
    pub version: i64,
    pub value: Vec<u8>,
    /// Lease the key is attached to, 0 for none.
    pub lease: i64,
}

/// What changed: a put or a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change, in revision order, for watchers. For a delete, `kv` holds
/// only the key and `mod_revision` (the deletion revision), as in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
}

const FIXED_BYTES: usize = 8 * 4 + 4;

impl KeyValue {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FIXED_BYTES + self.key.len() + self.value.len());
        out.extend_from_slice(&self.create_revision.to_be_bytes());
        out.extend_from_slice(&self.mod_revision.to_be_bytes());
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.lease.to_be_bytes());
        let key_bytes = u32::try_from(self.key.len()).expect("keys are far below 4 GiB");
        out.extend_from_slice(&key_bytes.to_be_bytes());
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value);
        out
    }

    /// Decodes a stored value; `None` if the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<KeyValue> {
        StoredKeyValue::parse(bytes).map(|stored| stored.to_key_value())
    }

    /// This key-value as a stored one reads: borrowed, not copied.
    pub fn as_stored(&self) -> StoredKeyValue<'_> {
        StoredKeyValue {
            key: &self.key,
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            value: &self.value,
            lease: self.lease,
        }
    }
}

/// A stored value read in place: a [`KeyValue`] whose key and value are
/// the stored bytes', for work that reads each once (a hash) and need
/// not copy them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredKeyValue<'a> {
    pub key: &'a [u8],
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub value: &'a [u8],
    pub lease: i64,
}

impl<'a> StoredKeyValue<'a> {
    /// Reads a stored value; `None` if the bytes are not one.
    pub fn parse(bytes: &'a [u8]) -> Option<StoredKeyValue<'a>> {
        let fixed = bytes.get(..FIXED_BYTES)?;
        let i64_at = |at: usize| i64::from_be_bytes(fixed[at..at + 8].try_into().expect("8 bytes"));
        let key_bytes = u32::from_be_bytes(fixed[32..36].try_into().expect("4 bytes")) as usize;
        let rest = &bytes[FIXED_BYTES..];
        if rest.len() < key_bytes {
            return None;
        }
        Some(StoredKeyValue {
            create_revision: i64_at(0),
            mod_revision: i64_at(8),
            version: i64_at(16),
            lease: i64_at(24),
            key: &rest[..key_bytes],
            value: &rest[key_bytes..],
        })
    }

    pub fn to_key_value(&self) -> KeyValue {
        KeyValue {
            key: self.key.to_vec(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            value: self.value.to_vec(),
            lease: self.lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: stored values round-trip, and short bytes are refused.
    #[test]
    fn encoding_round_trips() {
        let kv = KeyValue {
            key: b"foo".to_vec(),
            create_revision: 2,
            mod_revision: 5,
            version: 3,
            value: b"bar".to_vec(),
            lease: 7,
        };
        let bytes = kv.encode();
        assert_eq!(KeyValue::decode(&bytes), Some(kv));
        assert_eq!(KeyValue::decode(&bytes[..10]), None);
        assert_eq!(KeyValue::decode(&bytes[..FIXED_BYTES + 1]), None);
    }
}
