//! Keys exactly as etcd's benchmark tool makes them, so runs of both
//! tools touch the same keys and can be compared.
//!
//! The tool keeps one `--key-size` buffer of zeros for the whole run and,
//! for each request, writes the key number into its front with Go's
//! `binary.PutVarint` (zig-zag, then 7 bits per byte, low first), then
//! copies the whole buffer. Bytes past the varint keep whatever an earlier,
//! longer varint left there. That matters once sequential numbers wrap
//! around `--key-space-size`: key 0 of the second pass is not key 0 of the
//! first. [`KeyBuffer`] reproduces this byte for byte.
//!
//! Key numbers: `i % key-space-size` with `--sequential-keys` (and for
//! txn-put, `(i * txn-ops + j) % key-space-size`), otherwise uniformly
//! random in `[0, key-space-size)`. Random numbers come from this crate's
//! own generator, so random runs touch the same distribution of keys as
//! etcd's tool but not the same sequence.

/// Go's `binary.PutVarint`: writes `value` zig-zag encoded at the front of
/// `buffer` and returns the bytes written, or `None` when they do not fit
/// (Go panics there).
pub fn put_varint(buffer: &mut [u8], value: i64) -> Option<usize> {
    let mut zigzag = (value as u64) << 1;
    if value < 0 {
        zigzag = !zigzag;
    }
    let mut written = 0;
    while zigzag >= 0x80 {
        *buffer.get_mut(written)? = (zigzag as u8) | 0x80;
        zigzag >>= 7;
        written += 1;
    }
    *buffer.get_mut(written)? = zigzag as u8;
    Some(written + 1)
}

/// Bytes a key number needs; a `--key-size` smaller than this for the
/// largest number is refused up front.
pub fn varint_len(value: i64) -> usize {
    put_varint(&mut [0u8; 10], value).expect("ten bytes hold any varint")
}

/// The tool's reused key buffer.
pub struct KeyBuffer {
    buffer: Vec<u8>,
}

impl KeyBuffer {
    /// Checks that every key number below `key_space_size` fits.
    pub fn new(key_size: usize, key_space_size: u64) -> Result<KeyBuffer, String> {
        if key_space_size == 0 {
            return Err(format!("expected positive --key-space-size, got ({key_space_size})"));
        }
        let largest = (key_space_size - 1) as i64;
        if varint_len(largest) > key_size {
            return Err(format!(
                "--key-size {key_size} is too small for key numbers up to {largest} ({} bytes)",
                varint_len(largest)
            ));
        }
        Ok(KeyBuffer {
            buffer: vec![0; key_size],
        })
    }

    /// The next key: `number` written over the front of the buffer.
    pub fn key(&mut self, number: u64) -> Vec<u8> {
        put_varint(&mut self.buffer, number as i64).expect("checked in new");
        self.buffer.clone()
    }
}

/// A small, fast generator (SplitMix64) for random key numbers and value
/// bytes; load generation needs spread, not secrecy.
pub struct Rng(u64);

impl Rng {
    #[cfg(test)]
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn from_clock() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64);
        Rng(nanos)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, bound)` (bound > 0), without modulo bias.
    pub fn below(&mut self, bound: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % bound;
        loop {
            let value = self.next_u64();
            if value < zone {
                return value % bound;
            }
        }
    }

    pub fn bytes(&mut self, length: usize) -> Vec<u8> {
        (0..length).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the varint is Go's `binary.PutVarint`, checked against values
    // worked out from Go's definition (zig-zag, 7 bits per byte).
    #[test]
    fn varint_matches_go() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (1, &[0x02]),
            (-1, &[0x01]),
            (63, &[0x7e]),
            (64, &[0x80, 0x01]),
            (100, &[0xc8, 0x01]),
            (8191, &[0xfe, 0x7f]),
            (8192, &[0x80, 0x80, 0x01]),
            (99_999, &[0xbe, 0x9a, 0x0c]),
        ];
        for (value, expected) in cases {
            let mut buffer = [0u8; 10];
            let written = put_varint(&mut buffer, *value).unwrap();
            assert_eq!(&buffer[..written], *expected, "{value}");
        }
        assert_eq!(put_varint(&mut [0u8; 1], 64), None);
    }

    // Goal: keys are etcd's tool's, including the bytes a longer earlier
    // varint leaves behind once sequential numbers wrap around.
    #[test]
    fn sequential_keys_reuse_the_buffer_like_etcd() {
        let mut keys = KeyBuffer::new(8, 100).unwrap();
        let first: Vec<Vec<u8>> = (0..100).map(|i| keys.key(i % 100)).collect();
        assert_eq!(first[0], vec![0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(first[1], vec![2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(first[64], vec![0x80, 0x01, 0, 0, 0, 0, 0, 0]);
        assert_eq!(first[99], vec![0xc6, 0x01, 0, 0, 0, 0, 0, 0]);
        // Number 0 again: one byte written, the second left from 99.
        assert_eq!(keys.key(0), vec![0x00, 0x01, 0, 0, 0, 0, 0, 0]);
        // Every key of the first pass is distinct.
        let distinct: std::collections::BTreeSet<_> = first.iter().collect();
        assert_eq!(distinct.len(), 100);
    }

    #[test]
    fn key_size_must_hold_the_largest_number() {
        assert!(KeyBuffer::new(1, 64).is_ok());
        assert!(KeyBuffer::new(1, 65).is_err());
        assert!(KeyBuffer::new(8, 0).is_err());
    }

    #[test]
    fn random_numbers_stay_in_range_and_spread() {
        let mut rng = Rng::new(7);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[rng.below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }
}
