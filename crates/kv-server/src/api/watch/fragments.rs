//! Events on the wire: the store's events as etcd's `mvccpb.Event`, and
//! etcd's splitting of a large response into fragments.

use prost::Message as _;

use crate::proto::convert;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

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

/// etcd's fragmenting: a response of at least `limit` bytes with more than
/// one event goes out as several, each holding events while it stays below
/// `limit` (always at least one), all but the last marked `fragment`.
pub fn fragments(whole: pb::WatchResponse, limit: usize) -> Vec<pb::WatchResponse> {
    if whole.encoded_len() < limit || whole.events.len() < 2 {
        return vec![whole];
    }
    let empty = pb::WatchResponse {
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

    fn event(key: &str, value_bytes: usize) -> mvccpb::Event {
        mvccpb::Event {
            kv: Some(mvccpb::KeyValue {
                key: key.as_bytes().to_vec(),
                value: vec![b'v'; value_bytes],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    // Goal: fragments carry every event once, in order; each stays below
    // the limit unless it holds a single event; only the last is unmarked;
    // a small response or a single event is not split.
    #[test]
    fn fragments_split_at_the_limit() {
        let events: Vec<mvccpb::Event> = (0..10).map(|i| event(&format!("k{i}"), 300)).collect();
        let whole = pb::WatchResponse {
            watch_id: 3,
            events: events.clone(),
            ..Default::default()
        };
        let pieces = fragments(whole.clone(), 1000);
        assert!(pieces.len() >= 4, "{} pieces", pieces.len());
        let rejoined: Vec<mvccpb::Event> = pieces.iter().flat_map(|p| p.events.clone()).collect();
        assert_eq!(rejoined, events);
        for (i, piece) in pieces.iter().enumerate() {
            assert_eq!(piece.fragment, i + 1 < pieces.len());
            assert_eq!(piece.watch_id, 3);
            assert!(piece.encoded_len() < 1000 || piece.events.len() == 1);
        }
        assert_eq!(fragments(whole.clone(), 1 << 20), vec![whole]);
        let single = pb::WatchResponse {
            events: vec![event("big", 5000)],
            ..Default::default()
        };
        assert_eq!(fragments(single.clone(), 1000), vec![single]);
    }
}
