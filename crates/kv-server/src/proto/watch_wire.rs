//! Watch responses as bytes on the wire, built from pieces encoded once.
//!
//! A put watched by a thousand watchers is one event but a thousand
//! responses. Encoding each response from messages would convert and
//! encode the event a thousand times; instead each event is encoded once,
//! already framed as the `events` field of a `WatchResponse` (field tag,
//! length, `mvccpb.Event`), and every response that carries it copies
//! those bytes. A response of events is then: the `header` field (encoded
//! once per revision), the `watch_id`, the `fragment` flag, and its
//! events' bytes in order.
//!
//! # Format (etcd's `rpc.proto`)
//! `WatchResponse`: `header` = 1 (message), `watch_id` = 2 (int64),
//! `fragment` = 7 (bool), `events` = 11 (repeated message). Protobuf's
//! encoders write fields in number order, and decoders take them in any
//! order; these responses keep the number order, so they are
//! byte-for-byte what prost writes for the same message.

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};

use crate::proto::convert;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

const HEADER_FIELD: u32 = 1;
const WATCH_ID_FIELD: u32 = 2;
const FRAGMENT_FIELD: u32 = 7;
const EVENTS_FIELD: u32 = 11;

/// The store's event as etcd sends it, with the key's previous value if
/// asked for.
pub fn wire_event(event: mvcc::Event, previous: Option<mvcc::KeyValue>) -> mvccpb::Event {
    let kind = match event.kind {
        mvcc::EventKind::Put => mvccpb::event::EventType::Put,
        mvcc::EventKind::Delete => mvccpb::event::EventType::Delete,
    };
    mvccpb::Event {
        r#type: kind as i32,
        kv: Some(convert::key_value(event.kv)),
        prev_kv: previous.map(convert::key_value),
    }
}

/// Appends `message` to `buf` framed as field `number` of its parent:
/// the field's key, the message's length, the message.
fn put_field(number: u32, message: &impl prost::Message, buf: &mut BytesMut) {
    let len = message.encoded_len();
    buf.reserve(2 + encoded_len_varint(len as u64) + len);
    encode_key(number, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
    message.encode_raw(buf);
}

/// One event framed as a `WatchResponse.events` field.
pub fn event_field(event: &mvccpb::Event) -> Bytes {
    let mut buf = BytesMut::new();
    put_field(EVENTS_FIELD, event, &mut buf);
    buf.freeze()
}

/// Several events framed as [`event_field`]s in one buffer; each is a
/// slice of it.
#[derive(Debug, Default)]
pub struct EventFields {
    bytes: Bytes,
    /// Where each event's field ends in `bytes`; it starts where the one
    /// before ends.
    ends: Vec<usize>,
}

impl EventFields {
    /// Encodes `events` in order.
    pub fn encode(events: impl IntoIterator<Item = mvccpb::Event>) -> EventFields {
        let mut buf = BytesMut::new();
        let mut ends = Vec::new();
        for event in events {
            put_field(EVENTS_FIELD, &event, &mut buf);
            ends.push(buf.len());
        }
        EventFields {
            bytes: buf.freeze(),
            ends,
        }
    }

    /// Event `index`'s field, sharing this buffer.
    pub fn get(&self, index: usize) -> Bytes {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        self.bytes.slice(start..self.ends[index])
    }

    /// Bytes of every event held.
    pub fn len_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The fields of the events at `indices`, in that order. A slice of a
    /// `Bytes` keeps its whole buffer alive, so slices are taken only when
    /// they cover at least half of it; smaller picks are copied into a
    /// buffer of their own. So what waits for a slow client holds at most
    /// twice the bytes it will send.
    pub fn pick(&self, indices: &[usize]) -> Vec<Bytes> {
        let picked: usize = indices.iter().map(|&index| self.len_of(index)).sum();
        if picked * 2 >= self.bytes.len() {
            return indices.iter().map(|&index| self.get(index)).collect();
        }
        let mut own = BytesMut::with_capacity(picked);
        for &index in indices {
            own.extend_from_slice(&self.get(index));
        }
        let own = own.freeze();
        let mut start = 0;
        indices
            .iter()
            .map(|&index| {
                let end = start + self.len_of(index);
                let piece = own.slice(start..end);
                start = end;
                piece
            })
            .collect()
    }

    fn len_of(&self, index: usize) -> usize {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        self.ends[index] - start
    }
}

/// A response header framed as the `header` field.
pub fn header_field(header: &pb::ResponseHeader) -> Bytes {
    let mut buf = BytesMut::new();
    put_field(HEADER_FIELD, header, &mut buf);
    buf.freeze()
}

/// A response of events, in pieces encoded before.
#[derive(Debug, Default, Clone)]
pub struct EventsResponse {
    /// From [`header_field`].
    pub header: Bytes,
    pub watch_id: i64,
    pub fragment: bool,
    /// Each from [`event_field`] or [`EventFields::get`].
    pub events: Vec<Bytes>,
}

impl EventsResponse {
    /// The bytes the message takes.
    pub fn encoded_len(&self) -> usize {
        let id = if self.watch_id != 0 {
            1 + encoded_len_varint(self.watch_id as u64)
        } else {
            0
        };
        let fragment = if self.fragment { 2 } else { 0 };
        self.header.len() + id + fragment + self.events.iter().map(Bytes::len).sum::<usize>()
    }

    /// Writes the message, fields in number order.
    pub fn encode(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.header);
        if self.watch_id != 0 {
            encode_key(WATCH_ID_FIELD, WireType::Varint, buf);
            encode_varint(self.watch_id as u64, buf);
        }
        if self.fragment {
            encode_key(FRAGMENT_FIELD, WireType::Varint, buf);
            buf.put_u8(1);
        }
        for event in &self.events {
            buf.put_slice(event);
        }
    }
}

/// etcd's fragmenting: events whose response reaches `limit` bytes go out
/// as several responses, each holding events while it stays below `limit`
/// (always at least one), all but the last marked `fragment`. A response
/// below the limit, or of a single event, is not split.
pub fn fragments(whole: EventsResponse, limit: usize) -> Vec<EventsResponse> {
    if whole.encoded_len() < limit || whole.events.len() < 2 {
        return vec![whole];
    }
    let empty = EventsResponse {
        events: Vec::new(),
        fragment: true,
        ..whole.clone()
    };
    let mut pieces = Vec::new();
    let mut current = empty.clone();
    for event in whole.events {
        current.events.push(event);
        if current.events.len() > 1 && current.encoded_len() >= limit {
            let overflow = current.events.pop().expect("just pushed");
            pieces.push(std::mem::replace(&mut current, empty.clone()));
            current.events.push(overflow);
        }
    }
    current.fragment = false;
    pieces.push(current);
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    fn event(key: &str, value_bytes: usize, revision: i64) -> mvccpb::Event {
        mvccpb::Event {
            r#type: (revision % 2) as i32,
            kv: Some(mvccpb::KeyValue {
                key: key.as_bytes().to_vec(),
                value: vec![b'v'; value_bytes],
                mod_revision: revision,
                create_revision: 2,
                version: revision - 1,
                lease: 7,
            }),
            prev_kv: (revision % 3 == 0).then(|| mvccpb::KeyValue {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            }),
        }
    }

    fn header(revision: i64) -> pb::ResponseHeader {
        pb::ResponseHeader {
            cluster_id: u64::MAX - 3,
            member_id: 1 << 40,
            revision,
            raft_term: 5,
        }
    }

    fn decode(response: &EventsResponse) -> pb::WatchResponse {
        let mut buf = Vec::new();
        response.encode(&mut buf);
        assert_eq!(buf.len(), response.encoded_len());
        pb::WatchResponse::decode(buf.as_slice()).expect("decodes")
    }

    // Goal: a response built from pieces decodes to the message it stands
    // for, and is byte-for-byte what prost writes for that message, for
    // any watch id (zero, negative, large), fragment flag and events,
    // whether the events were encoded one by one or together.
    #[test]
    fn pieces_encode_the_message_prost_would() {
        let events: Vec<mvccpb::Event> = (2..9).map(|r| event(&format!("key{r}"), r as usize * 10, r)).collect();
        let together = EventFields::encode(events.clone());
        for (watch_id, fragment) in [(0, false), (1, true), (-1, false), (i64::MAX, true)] {
            for shared in [false, true] {
                let pieces = (0..events.len())
                    .map(|i| {
                        if shared {
                            together.get(i)
                        } else {
                            event_field(&events[i])
                        }
                    })
                    .collect();
                let response = EventsResponse {
                    header: header_field(&header(8)),
                    watch_id,
                    fragment,
                    events: pieces,
                };
                let expected = pb::WatchResponse {
                    header: Some(header(8)),
                    watch_id,
                    fragment,
                    events: events.clone(),
                    ..Default::default()
                };
                assert_eq!(decode(&response), expected);
                let mut ours = Vec::new();
                response.encode(&mut ours);
                assert_eq!(ours, expected.encode_to_vec(), "watch id {watch_id}");
            }
        }
        assert_eq!(
            together.len_bytes(),
            (0..events.len()).map(|i| together.get(i).len()).sum::<usize>()
        );
    }

    // Goal: picks hold the picked fields in order, sharing the batch's
    // buffer when they cover half of it or more and in a buffer of their
    // own otherwise.
    #[test]
    fn picks_share_or_copy_by_their_share() {
        let events: Vec<mvccpb::Event> = (2..12).map(|r| event(&format!("k{r}"), 20, r)).collect();
        let fields = EventFields::encode(events);
        let within = |piece: &Bytes| {
            let (start, end) = (
                fields.bytes.as_ptr() as usize,
                fields.bytes.as_ptr() as usize + fields.bytes.len(),
            );
            (start..end).contains(&(piece.as_ptr() as usize))
        };
        for indices in [
            vec![0, 3],
            vec![9],
            (0..10).collect::<Vec<_>>(),
            vec![1, 2, 4, 5, 6, 7, 8],
        ] {
            let picked = fields.pick(&indices);
            let expected: Vec<Bytes> = indices.iter().map(|&i| fields.get(i)).collect();
            assert_eq!(picked, expected, "{indices:?}");
            let shares = indices.len() * 2 >= 10;
            assert!(picked.iter().all(|piece| within(piece) == shares), "{indices:?}");
        }
    }

    // Goal: fragments carry every event once, in order; each stays below
    // the limit unless it holds a single event; only the last is unmarked;
    // a small response or a single event is not split.
    #[test]
    fn fragments_split_at_the_limit() {
        let events: Vec<mvccpb::Event> = (0..10).map(|i| event(&format!("k{i}"), 300, 4)).collect();
        let whole = EventsResponse {
            header: header_field(&header(4)),
            watch_id: 3,
            fragment: false,
            events: events.iter().map(event_field).collect(),
        };
        let pieces = fragments(whole.clone(), 1000);
        assert!(pieces.len() >= 4, "{} pieces", pieces.len());
        let rejoined: Vec<mvccpb::Event> = pieces.iter().flat_map(|p| decode(p).events).collect();
        assert_eq!(rejoined, events);
        for (i, piece) in pieces.iter().enumerate() {
            let message = decode(piece);
            assert_eq!(message.fragment, i + 1 < pieces.len());
            assert_eq!(message.watch_id, 3);
            assert!(piece.encoded_len() < 1000 || piece.events.len() == 1);
        }
        assert_eq!(fragments(whole.clone(), 1 << 20).len(), 1);
        let single = EventsResponse {
            events: vec![event_field(&event("big", 5000, 4))],
            ..whole
        };
        assert_eq!(fragments(single, 1000).len(), 1);
    }
}
