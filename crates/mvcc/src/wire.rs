//! The size of a range's answer as etcd's protobuf messages encode it,
//! and the bound on it.
//!
//! etcd's gRPC server sends no message over `math.MaxInt32` bytes: a
//! larger Range answer is built whole and then refused with
//! ResourceExhausted, "grpc: trying to send message larger than max (N
//! vs. 2147483647)". The store refuses the same ranges with the same
//! answer, but counts the answer's encoding while it loads it, so a range
//! holds at most [`ANSWER_BYTES_MAX`] bytes of key-values before it stops
//! keeping them (range.rs). Beside them it holds what its walk of the
//! index found: an entry per key of the range, and for a keys-only range
//! answered from the index, the key-values themselves (a key and three
//! numbers each, far below the limit at any size this store holds). The sizes here are those of prost's encoding
//! of `etcdserverpb.RangeResponse` and `mvccpb.KeyValue` (the server's
//! tests check them against it).

use crate::key_value::KeyValue;

/// The largest answer the store builds, in encoded bytes: etcd's gRPC
/// send limit (`math.MaxInt32`), so that every answer etcd sends is sent
/// and every one it refuses is refused, before the member holds it.
pub const ANSWER_BYTES_MAX: u64 = i32::MAX as u64;

/// The most a `ResponseHeader` adds to a RangeResponse: its tag and
/// length, and four varint fields of at most ten bytes each with their
/// tags. The server adds the header after the store answered, so the
/// store keeps this much of the bound for it.
pub const HEADER_BYTES_MAX: u64 = 2 + 4 * 11;

/// A range's bound on its answer; [`ANSWER_BYTES_MAX`] unless a caller
/// asks for less.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerBytesMax(pub u64);

impl Default for AnswerBytesMax {
    fn default() -> AnswerBytesMax {
        AnswerBytesMax(ANSWER_BYTES_MAX)
    }
}

/// Bytes of `value` as a protobuf varint.
pub fn varint_len(value: u64) -> u64 {
    u64::from((64 - (value | 1).leading_zeros()).div_ceil(7))
}

/// Bytes of a length-delimited field of `body` bytes (tags below 16).
pub fn framed_len(body: u64) -> u64 {
    1 + varint_len(body) + body
}

/// Bytes of an int64 field holding `value` (absent when 0).
fn int_len(value: i64) -> u64 {
    if value == 0 {
        0
    } else {
        1 + varint_len(value as u64)
    }
}

/// Bytes of a bytes field holding `bytes` (absent when empty).
fn bytes_len(bytes: &[u8]) -> u64 {
    if bytes.is_empty() {
        0
    } else {
        framed_len(bytes.len() as u64)
    }
}

/// Bytes of `kv` encoded as `mvccpb.KeyValue`.
pub fn key_value_len(kv: &KeyValue) -> u64 {
    bytes_len(&kv.key)
        + int_len(kv.create_revision)
        + int_len(kv.mod_revision)
        + int_len(kv.version)
        + bytes_len(&kv.value)
        + int_len(kv.lease)
}

/// Bytes `kv` adds to a RangeResponse (its `kvs` field, framed).
pub fn answer_entry_len(kv: &KeyValue) -> u64 {
    framed_len(key_value_len(kv))
}

/// The most an answer's entry takes beside its key's and value's bytes:
/// the entry's tag and length, the key's and the value's, and four int64
/// fields (tag and at most ten bytes each).
const ENTRY_OVERHEAD_MAX: u64 = 3 * 11 + 4 * 11;

/// At least [`answer_entry_len`], and cheaper: what a range counts while
/// it is far from its bound.
pub fn answer_entry_len_at_most(kv: &KeyValue) -> u64 {
    (kv.key.len() + kv.value.len()) as u64 + ENTRY_OVERHEAD_MAX
}

/// Bytes of a RangeResponse's `more` and `count` fields.
pub fn answer_tail_len(more: bool, count: i64) -> u64 {
    2 * u64::from(more) + int_len(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_take_seven_bits_a_byte() {
        for (value, bytes) in [
            (0, 1),
            (1, 1),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::MAX, 10),
        ] {
            assert_eq!(varint_len(value), bytes, "{value}");
        }
        // A negative int64 is ten bytes, as protobuf encodes it.
        assert_eq!(int_len(-1), 11);
    }

    #[test]
    fn a_key_value_counts_its_present_fields() {
        let kv = KeyValue {
            key: b"k".to_vec(),
            create_revision: 2,
            mod_revision: 300,
            version: 1,
            value: vec![0; 200],
            lease: 0,
        };
        // key 1+1+1, create 1+1, mod 1+2, version 1+1, value 1+2+200.
        assert_eq!(key_value_len(&kv), 3 + 2 + 3 + 2 + 203);
        assert_eq!(answer_entry_len(&kv), 1 + 2 + 213);
        assert_eq!(key_value_len(&KeyValue::default()), 0);
    }

    #[test]
    fn the_quick_count_is_never_below_the_exact_one() {
        let largest = KeyValue {
            key: vec![1; 1 << 20],
            create_revision: -1,
            mod_revision: -1,
            version: -1,
            value: vec![2; 1 << 21],
            lease: -1,
        };
        for kv in [KeyValue::default(), largest] {
            assert!(answer_entry_len_at_most(&kv) >= answer_entry_len(&kv));
        }
        let quick = answer_entry_len_at_most(&KeyValue::default());
        assert_eq!(quick, ENTRY_OVERHEAD_MAX, "no slack beyond the fields' largest");
    }
}
