//! A failing sub-history drawn for a person to read: an SVG timeline with
//! one row per client and one bar per operation, from its call to its
//! return (an unknown outcome runs to the right edge, dashed), labelled
//! with what was asked and what came back.

use std::fmt::Write as _;

use crate::history::{Call, Operation, Return};

const WIDTH: f64 = 1200.0;
const ROW: f64 = 48.0;
const MARGIN: f64 = 80.0;
/// Room kept for a label at the right edge.
const LABEL_ROOM: f64 = 420.0;

fn label(operation: &Operation) -> String {
    let call = match &operation.call {
        Call::Put { value, lease, .. } if *lease != 0 => format!("put {value} lease {lease}"),
        Call::Put { value, .. } => format!("put {value}"),
        Call::Get { .. } => "get".to_string(),
        Call::Delete { .. } => "delete".to_string(),
        Call::Cas { expected, value, .. } => format!("cas mod={expected} → {value}"),
        Call::LeaseGrant { id } => format!("grant {id}"),
        Call::LeaseRevoke { id } => format!("revoke {id}"),
    };
    let result = match &operation.result {
        Return::Put { revision } => format!("@{revision}"),
        Return::Get {
            kv: Some((value, revision)),
            ..
        } => format!("{value}@{revision}"),
        Return::Get { kv: None, .. } => "none".to_string(),
        Return::Delete { revision, deleted } => format!("{deleted} @{revision}"),
        Return::Cas { revision, succeeded } => format!("{succeeded} @{revision}"),
        Return::LeaseGrant => "ok".to_string(),
        Return::LeaseRevoke { revision } => format!("@{revision}"),
        Return::Unknown(error) => format!("? {error}"),
    };
    format!("{call} ⇒ {result}")
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The SVG of `operations` on `key`.
pub fn svg(key: &str, operations: &[Operation]) -> String {
    let start = operations.iter().map(|o| o.invoked).min().unwrap_or(0);
    let end = operations
        .iter()
        .map(|o| if o.returned == u64::MAX { o.invoked } else { o.returned })
        .max()
        .unwrap_or(start)
        .max(start + 1);
    let mut clients: Vec<usize> = operations.iter().map(|o| o.client).collect();
    clients.sort_unstable();
    clients.dedup();
    let x = |at: u64| MARGIN + (at.saturating_sub(start)) as f64 / (end - start) as f64 * (WIDTH - 2.0 * MARGIN);
    let height = ROW * (clients.len() as f64 + 1.5);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" font-family=\"monospace\" font-size=\"11\">\n\
         <text x=\"8\" y=\"18\">key {}: not linearizable ({} operations; times in ms from the first call)</text>\n",
        escape(key),
        operations.len()
    );
    for (row, client) in clients.iter().enumerate() {
        let y = ROW * (row as f64 + 1.0);
        let _ = writeln!(out, "<text x=\"8\" y=\"{}\">client {client}</text>", y + 16.0);
        for operation in operations.iter().filter(|o| o.client == *client) {
            let unknown = operation.returned == u64::MAX;
            let (left, right) = (
                x(operation.invoked),
                if unknown { WIDTH - 8.0 } else { x(operation.returned) },
            );
            let dash = if unknown { " stroke-dasharray=\"4 3\"" } else { "" };
            let _ = writeln!(
                out,
                "<rect x=\"{left:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\" fill=\"#cde\" stroke=\"#246\"{dash}/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\">{} [{:.3}–{}]</text>",
                y + 4.0,
                (right - left).max(2.0),
                left.min(WIDTH - LABEL_ROOM),
                y + 34.0,
                escape(&label(operation)),
                (operation.invoked - start) as f64 / 1e6,
                if unknown {
                    "?".to_string()
                } else {
                    format!("{:.3}", (operation.returned - start) as f64 / 1e6)
                },
            );
        }
    }
    out.push_str("</svg>\n");
    out
}
