//! Record types and their payload encodings. All integers are little-endian.
//!
//! ```text
//! type  name        payload
//! 1     entry       index u64, term u64, data (the rest; opaque to the log)
//! 2     hard state  term u64, vote u64, commit u64
//! 3     snapshot    index u64, term u64, auto_leave u8,
//!                   then four lists, each a u32 count followed by that many
//!                   u64 ids: voters, learners, voters_outgoing, learners_next
//! 4     crc seed    crc u32 (the crc the previous segment ended with)
//! 5     metadata    opaque bytes
//! ```

/// A raft log entry as the log sees it: position plus opaque bytes (the
/// server stores the encoded raft entry there).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
}

/// Raft's persistent state: current term, vote, and commit index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HardState {
    pub term: u64,
    pub vote: u64,
    pub commit: u64,
}

/// The membership a snapshot was taken under, as raft describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfState {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub voters_outgoing: Vec<u64>,
    pub learners_next: Vec<u64>,
    pub auto_leave: bool,
}

/// Where a snapshot stands in the log. Replay starts from one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotMeta {
    pub index: u64,
    pub term: u64,
    pub conf_state: ConfState,
}

/// One record of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Entry(Entry),
    HardState(HardState),
    Snapshot(SnapshotMeta),
    CrcSeed(u32),
    Metadata(Vec<u8>),
}

/// Bytes of an entry payload before its data: index and term.
pub const ENTRY_FIXED_BYTES: usize = 16;

pub const TYPE_ENTRY: u8 = 1;
pub const TYPE_HARD_STATE: u8 = 2;
pub const TYPE_SNAPSHOT: u8 = 3;
pub const TYPE_CRC_SEED: u8 = 4;
pub const TYPE_METADATA: u8 = 5;

impl Record {
    pub fn record_type(&self) -> u8 {
        match self {
            Record::Entry(_) => TYPE_ENTRY,
            Record::HardState(_) => TYPE_HARD_STATE,
            Record::Snapshot(_) => TYPE_SNAPSHOT,
            Record::CrcSeed(_) => TYPE_CRC_SEED,
            Record::Metadata(_) => TYPE_METADATA,
        }
    }

    /// Appends the payload bytes to `out`.
    pub fn encode_payload(&self, out: &mut Vec<u8>) {
        match self {
            Record::Entry(entry) => encode_entry_payload(entry.index, entry.term, &entry.data, out),
            Record::HardState(hard_state) => encode_hard_state_payload(hard_state, out),
            Record::Snapshot(snapshot) => {
                out.extend_from_slice(&snapshot.index.to_le_bytes());
                out.extend_from_slice(&snapshot.term.to_le_bytes());
                let conf = &snapshot.conf_state;
                out.push(conf.auto_leave as u8);
                for list in [&conf.voters, &conf.learners, &conf.voters_outgoing, &conf.learners_next] {
                    let count = u32::try_from(list.len()).expect("conf state list fits in u32");
                    out.extend_from_slice(&count.to_le_bytes());
                    for id in list {
                        out.extend_from_slice(&id.to_le_bytes());
                    }
                }
            }
            Record::CrcSeed(crc) => out.extend_from_slice(&crc.to_le_bytes()),
            Record::Metadata(bytes) => out.extend_from_slice(bytes),
        }
    }

    /// Decodes a payload of the given type; `None` when it does not parse.
    pub fn decode(record_type: u8, payload: &[u8]) -> Option<Record> {
        let mut reader = Reader(payload);
        let record = match record_type {
            TYPE_ENTRY => Record::Entry(Entry {
                index: reader.u64()?,
                term: reader.u64()?,
                data: reader.rest().to_vec(),
            }),
            TYPE_HARD_STATE => Record::HardState(HardState {
                term: reader.u64()?,
                vote: reader.u64()?,
                commit: reader.u64()?,
            }),
            TYPE_SNAPSHOT => {
                let index = reader.u64()?;
                let term = reader.u64()?;
                let auto_leave = match reader.u8()? {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                let mut lists: [Vec<u64>; 4] = Default::default();
                for list in &mut lists {
                    let count = reader.u32()? as usize;
                    // Each id is 8 bytes; refuse counts the payload cannot hold
                    // before allocating for them.
                    if count > reader.0.len() / 8 {
                        return None;
                    }
                    list.reserve_exact(count);
                    for _ in 0..count {
                        list.push(reader.u64()?);
                    }
                }
                let [voters, learners, voters_outgoing, learners_next] = lists;
                Record::Snapshot(SnapshotMeta {
                    index,
                    term,
                    conf_state: ConfState {
                        voters,
                        learners,
                        voters_outgoing,
                        learners_next,
                        auto_leave,
                    },
                })
            }
            TYPE_CRC_SEED => Record::CrcSeed(reader.u32()?),
            TYPE_METADATA => Record::Metadata(reader.rest().to_vec()),
            _ => return None,
        };
        reader.0.is_empty().then_some(record)
    }
}

/// Entry payload without building an owned [`Entry`] first (the hot path).
pub(crate) fn encode_entry_payload(index: u64, term: u64, data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&term.to_le_bytes());
    out.extend_from_slice(data);
}

pub(crate) fn encode_hard_state_payload(hard_state: &HardState, out: &mut Vec<u8>) {
    out.extend_from_slice(&hard_state.term.to_le_bytes());
    out.extend_from_slice(&hard_state.vote.to_le_bytes());
    out.extend_from_slice(&hard_state.commit.to_le_bytes());
}

/// A cursor over a payload; every read checks the bytes are there.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, tail) = self.0.split_first_chunk::<N>()?;
        self.0 = tail;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every record type survives encode then decode unchanged, and a
    // payload with bytes missing or left over is refused.
    #[test]
    fn payloads_round_trip_and_reject_bad_lengths() {
        let records = [
            Record::Entry(Entry {
                index: 7,
                term: 3,
                data: b"hello".to_vec(),
            }),
            Record::Entry(Entry {
                index: 1,
                term: 1,
                data: Vec::new(),
            }),
            Record::HardState(HardState {
                term: 5,
                vote: 2,
                commit: 99,
            }),
            Record::Snapshot(SnapshotMeta {
                index: 100,
                term: 4,
                conf_state: ConfState {
                    voters: vec![1, 2, 3],
                    learners: vec![4],
                    voters_outgoing: vec![],
                    learners_next: vec![5, 6],
                    auto_leave: true,
                },
            }),
            Record::CrcSeed(0xdead_beef),
            Record::Metadata(b"cluster".to_vec()),
        ];
        for record in records {
            let mut payload = Vec::new();
            record.encode_payload(&mut payload);
            assert_eq!(Record::decode(record.record_type(), &payload), Some(record.clone()));
            if !matches!(record, Record::Entry(_) | Record::Metadata(_)) {
                payload.push(0);
                assert_eq!(
                    Record::decode(record.record_type(), &payload),
                    None,
                    "{record:?} + extra byte"
                );
                payload.truncate(payload.len() - 2);
                assert_eq!(
                    Record::decode(record.record_type(), &payload),
                    None,
                    "{record:?} - a byte"
                );
            }
        }
        assert_eq!(Record::decode(99, b""), None);
        // A snapshot claiming a huge voter list in a short payload.
        let mut payload = vec![0u8; 17];
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Record::decode(TYPE_SNAPSHOT, &payload), None);
    }
}
