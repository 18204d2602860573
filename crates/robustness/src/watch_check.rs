//! etcd's watch guarantees, checked against what really happened.
//!
//! "What happened" is the round's event history: every change to the
//! round's keys, read at the end by a fresh watch from the round's first
//! revision, and itself checked against the operations' history (every
//! acknowledged write is in it at the revision it was acknowledged with,
//! and nothing is in it that no operation wrote). Each watcher of the
//! round is then checked for etcd's guarantees
//! (etcd.io/docs/v3.5/learning/api_guarantees/#watch-apis):
//!
//! - ordered: events come in revision order, never going back;
//! - unique: no event comes twice;
//! - reliable: no event in the watched span is missing;
//! - atomic: all of a revision's events come in one response;
//! - resumable: a watcher broken by a fault and started again from its
//!   last revision plus one continues with neither gap nor repeat (checked
//!   by the above across its sessions);
//! - bookmarkable: a progress notification at revision R comes after
//!   every event up to R, and no event up to R comes after it.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::history::{Call, History, Return};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    pub revision: i64,
    pub key: String,
    /// The value put; `None` for a delete.
    pub value: Option<String>,
}

/// One response a watcher received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Received {
    Events(Vec<WatchEvent>),
    /// A progress notification at this header revision.
    Progress(i64),
}

/// One watch stream of a watcher, from `start` on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub start: i64,
    pub received: Vec<Received>,
}

/// A watcher over the round's keys, possibly across several sessions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WatcherLog {
    pub sessions: Vec<Session>,
}

/// Checks the event history against the operations: every acknowledged
/// write is there at its revision (a missing one is a lost write), and
/// every event is some operation's doing. Returns (lost writes, other
/// violations).
pub fn check_truth(truth: &[WatchEvent], history: &History) -> (Vec<String>, Vec<String>) {
    let at: BTreeMap<(i64, &str), &WatchEvent> = truth.iter().map(|e| ((e.revision, e.key.as_str()), e)).collect();
    let mut lost = Vec::new();
    let mut written: HashSet<(&str, &str)> = HashSet::new();
    for operation in &history.operations {
        let (key, value, revision) = match (&operation.call, &operation.result) {
            (Call::Put { key, value, .. }, result) | (Call::Cas { key, value, .. }, result) => {
                written.insert((key, value));
                match result {
                    Return::Put { revision }
                    | Return::Cas {
                        revision,
                        succeeded: true,
                    } => (key, Some(value.clone()), *revision),
                    _ => continue,
                }
            }
            (Call::Delete { key }, Return::Delete { revision, deleted: 1 }) => (key, None, *revision),
            _ => continue,
        };
        match at.get(&(revision, key.as_str())) {
            Some(event) if event.value == value => {}
            other => lost.push(format!(
                "{key}: acknowledged at revision {revision} as {value:?}, history has {other:?}"
            )),
        }
    }
    let mut phantom = Vec::new();
    for event in truth {
        if let Some(value) = &event.value {
            if !written.contains(&(event.key.as_str(), value.as_str())) {
                phantom.push(format!("{event:?} was never written"));
            }
        }
    }
    (lost, phantom)
}

/// Checks one watcher against the event history; returns its violations.
pub fn check_watcher(log: &WatcherLog, truth: &[WatchEvent]) -> Vec<String> {
    let Some(first) = log.sessions.first().map(|s| s.start) else {
        return Vec::new();
    };
    let mut violations = Vec::new();
    let mut delivered: Vec<&WatchEvent> = Vec::new();
    let mut seen: HashSet<(i64, &str)> = HashSet::new();
    let mut last_response_revision = 0;
    let mut reached = first - 1;
    for received in log.sessions.iter().flat_map(|s| &s.received) {
        match received {
            Received::Events(events) => {
                for event in events {
                    if event.revision < reached.max(last_response_revision) {
                        violations.push(format!("ordered: {event:?} after revision {reached}"));
                    }
                    if !seen.insert((event.revision, &event.key)) {
                        violations.push(format!("unique: {event:?} came twice"));
                    }
                    reached = reached.max(event.revision);
                    delivered.push(event);
                }
                for revision in events.iter().map(|e| e.revision).collect::<HashSet<_>>() {
                    let whole = truth.iter().filter(|e| e.revision == revision).count();
                    let here = events.iter().filter(|e| e.revision == revision).count();
                    if here != whole {
                        violations.push(format!(
                            "atomic: revision {revision} came as {here} of its {whole} events"
                        ));
                    }
                }
                last_response_revision = reached + 1;
            }
            Received::Progress(revision) => {
                let owed = truth
                    .iter()
                    .filter(|e| e.revision >= first && e.revision <= *revision)
                    .filter(|e| !seen.contains(&(e.revision, e.key.as_str())))
                    .count();
                if owed > 0 {
                    violations.push(format!(
                        "bookmarkable: progress at {revision} with {owed} events not yet sent"
                    ));
                }
                reached = reached.max(*revision);
                last_response_revision = last_response_revision.max(*revision + 1);
            }
        }
    }
    let expected: Vec<&WatchEvent> = truth
        .iter()
        .filter(|e| e.revision >= first && e.revision <= reached)
        .collect();
    let mut sorted = delivered.clone();
    sorted.sort_by_key(|e| (e.revision, e.key.clone()));
    sorted.dedup();
    if sorted.len() != expected.len() || sorted.iter().zip(&expected).any(|(a, b)| a != b) {
        violations.push(format!(
            "reliable: {} events delivered in [{first}, {reached}], history has {}",
            sorted.len(),
            expected.len()
        ));
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(revision: i64, key: &str, value: &str) -> WatchEvent {
        WatchEvent {
            revision,
            key: key.into(),
            value: Some(value.into()),
        }
    }

    fn truth() -> Vec<WatchEvent> {
        vec![
            event(5, "a", "1"),
            event(6, "a", "2"),
            event(6, "b", "3"),
            event(7, "b", "4"),
        ]
    }

    fn watcher(sessions: Vec<(i64, Vec<Received>)>) -> WatcherLog {
        WatcherLog {
            sessions: sessions
                .into_iter()
                .map(|(start, received)| Session { start, received })
                .collect(),
        }
    }

    // Goal: a watcher that got everything, across a resumed session and
    // with a timely progress notification, passes.
    #[test]
    fn a_faithful_watcher_passes() {
        let t = truth();
        let log = watcher(vec![
            (5, vec![Received::Events(vec![t[0].clone()]), Received::Progress(5)]),
            (
                6,
                vec![
                    Received::Events(vec![t[1].clone(), t[2].clone()]),
                    Received::Events(vec![t[3].clone()]),
                ],
            ),
        ]);
        assert_eq!(check_watcher(&log, &t), Vec::<String>::new());
    }

    // Goal: each guarantee's planted violation is caught by name.
    #[test]
    fn planted_violations_are_caught() {
        let t = truth();
        let cases = [
            (
                "ordered",
                vec![(
                    5,
                    vec![
                        Received::Events(vec![t[1].clone(), t[2].clone()]),
                        Received::Events(vec![t[0].clone()]),
                    ],
                )],
            ),
            (
                "unique",
                vec![
                    (5, vec![Received::Events(vec![t[0].clone()])]),
                    (5, vec![Received::Events(vec![t[0].clone()])]),
                ],
            ),
            (
                "reliable",
                vec![(
                    5,
                    vec![
                        Received::Events(vec![t[0].clone()]),
                        Received::Events(vec![t[3].clone()]),
                    ],
                )],
            ),
            (
                "atomic",
                vec![(
                    5,
                    vec![
                        Received::Events(vec![t[0].clone(), t[1].clone()]),
                        Received::Events(vec![t[2].clone()]),
                    ],
                )],
            ),
            (
                "bookmarkable",
                vec![(5, vec![Received::Progress(6), Received::Events(vec![t[0].clone()])])],
            ),
        ];
        for (guarantee, sessions) in cases {
            let found = check_watcher(&watcher(sessions), &t);
            assert!(found.iter().any(|v| v.starts_with(guarantee)), "{guarantee}: {found:?}");
        }
    }

    // Goal: an acknowledged put missing from the event history is a lost
    // write; an event no operation wrote is a violation.
    #[test]
    fn the_history_is_checked_against_the_operations() {
        use crate::history::Operation;
        let put = |value: &str, revision: i64| Operation {
            client: 0,
            call: Call::Put {
                key: "a".into(),
                value: value.into(),
                lease: 0,
            },
            invoked: 0,
            returned: 1,
            result: Return::Put { revision },
        };
        let history = History {
            operations: vec![put("1", 5), put("2", 6)],
        };
        let (lost, phantom) = check_truth(&[event(5, "a", "1"), event(6, "a", "2")], &history);
        assert!(lost.is_empty() && phantom.is_empty(), "{lost:?} {phantom:?}");
        let (lost, phantom) = check_truth(&[event(5, "a", "1"), event(6, "a", "x")], &history);
        assert_eq!((lost.len(), phantom.len()), (1, 1));
    }
}
