//! etcd's "request stats" line: a unary gRPC call (the gateway's calls
//! too, which pass through the same services) that took longer than
//! `--warning-unary-request-duration` is logged at warn with its start,
//! time spent, remote address, method, and the counts and sizes of what
//! it asked and answered, as etcd's unary interceptor logs it.
//!
//! [`SlowLog`] times every call and writes the line; the KV handlers,
//! which alone know what a request held, keep a copy of it without put
//! values (its keys: a small allocation or two per call) and attach a
//! [`Stats`] to their answer when they see, by the same clock
//! ([`CallStarted`]), that the call was slow. Other methods log etcd's
//! `-1` counts and sizes.
//!
//! The request's content is written as etcd 3.7 writes it: protobuf's
//! text form (fields spaced by blanks, nested messages in `{}`), except
//! for puts, whose value is replaced by its size in etcd's loggable form
//! (`<key:"k" value_size:3 >`); a txn's compares and branches are in
//! `<>`. etcd's own text form spaces fields by one or two blanks at
//! random; one is used here.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use prost::Message;

use crate::connection_info::ConnectionInfo;
use crate::proto::etcdserverpb as pb;

/// What a KV call asked and answered, for its line.
#[derive(Debug, Clone)]
pub struct Stats {
    pub request_count: i64,
    pub request_size: i64,
    pub response_count: i64,
    pub response_size: i64,
    pub content: String,
}

/// When the call reached the services, in its request's extensions: the
/// handlers judge slowness by the clock [`SlowLog`] logs by.
#[derive(Debug, Clone, Copy)]
pub struct CallStarted(pub Instant);

/// When the call with these `extensions` started ([`CallStarted`], or
/// now for a call that did not pass [`SlowLog`]).
pub fn started(extensions: &axum::http::Extensions) -> Instant {
    extensions.get::<CallStarted>().map_or_else(Instant::now, |at| at.0)
}

/// One call's timing, started as the call reaches its service
/// (`api::grpc`): [`SlowLog::end`] logs the call if it was slower than
/// the threshold and is unary (a stream's handler returns at once, its
/// time is the stream's).
pub struct SlowLog {
    threshold: Duration,
    uri: axum::http::Uri,
    remote: Option<SocketAddr>,
    started: Instant,
}

impl SlowLog {
    /// Starts timing `request`'s call, and marks the request with its
    /// start ([`CallStarted`]) for the handler.
    pub fn start<B>(threshold: Duration, request: &mut axum::http::Request<B>) -> SlowLog {
        let started = Instant::now();
        request.extensions_mut().insert(CallStarted(started));
        SlowLog {
            threshold,
            uri: request.uri().clone(),
            remote: ConnectionInfo::of(request.extensions()).map(|info| info.remote),
            started,
        }
    }

    /// Ends the call with `response`, writing etcd's line if it was slow.
    pub fn end(self, response: &mut axum::http::Response<impl Sized>) {
        let spent = self.started.elapsed();
        if spent <= self.threshold || !crate::metrics::grpc::is_unary(self.uri.path()) {
            return;
        }
        let start_time = SystemTime::now().checked_sub(spent).unwrap_or_else(SystemTime::now);
        let stats = response.extensions_mut().remove::<Stats>();
        let (counts, content) = match &stats {
            Some(s) => (
                [s.request_count, s.request_size, s.response_count, s.response_size],
                s.content.as_str(),
            ),
            None => ([-1; 4], ""),
        };
        tracing::warn!(
            "start time" = %crate::logging::timestamp(start_time),
            "time spent" = %crate::logging::go_duration(spent),
            remote = self.remote.map_or_else(|| "No remote client info.".to_string(), |r| r.to_string()),
            "response type" = self.uri.path(),
            "request count" = counts[0],
            "request size" = counts[1],
            "response count" = counts[2],
            "response size" = counts[3],
            "request content" = content,
            "request stats"
        );
    }
}

/// Whether a handler that started at `started` is slow enough for its
/// call to be logged, so that it builds its [`Stats`].
pub fn slow(started: Instant, threshold: Duration) -> bool {
    started.elapsed() > threshold
}

fn size(message: &impl Message) -> i64 {
    message.encoded_len() as i64
}

impl Stats {
    pub fn range(request: &pb::RangeRequest, response: &pb::RangeResponse) -> Stats {
        Stats {
            request_count: 0,
            request_size: size(request),
            response_count: response.count,
            response_size: size(response),
            content: range_text(request),
        }
    }

    /// `request` with its value already left out (see [`put_sketch`]).
    pub fn put(request: &pb::PutRequest, value_size: usize, response: &pb::PutResponse) -> Stats {
        Stats {
            request_count: 1,
            request_size: size(request) + value_size as i64 + length_prefix(value_size),
            response_count: 0,
            response_size: size(response),
            content: put_text(request, value_size),
        }
    }

    pub fn delete_range(request: &pb::DeleteRangeRequest, response: &pb::DeleteRangeResponse) -> Stats {
        Stats {
            request_count: 0,
            request_size: size(request),
            response_count: response.deleted,
            response_size: size(response),
            content: delete_text(request),
        }
    }

    /// `request` with put values left out and their sizes in
    /// `value_sizes`, in the order of its puts (see [`txn_sketch`]).
    pub fn txn(request: &pb::TxnRequest, sizes: &TxnSizes, response: &pb::TxnResponse) -> Stats {
        let (ops, size) = if response.succeeded {
            (request.success.len(), sizes.success)
        } else {
            (request.failure.len(), sizes.failure)
        };
        Stats {
            request_count: ops as i64,
            request_size: size,
            response_count: 0,
            response_size: self::size(response),
            content: txn_text(request, &sizes.values),
        }
    }
}

/// The bytes a field's length prefix and tag take (value field 2).
fn length_prefix(len: usize) -> i64 {
    if len == 0 {
        return 0;
    }
    1 + prost::encoding::encoded_len_varint(len as u64) as i64
}

/// A put without its value (kept for the log only when slow), and the
/// value's size.
pub fn put_sketch(request: &pb::PutRequest) -> (pb::PutRequest, usize) {
    (without_value(request), request.value.len())
}

/// The sizes of a txn's branches (as etcd counts them: each op's encoded
/// size) and of its puts' values, in order.
#[derive(Debug, Default)]
pub struct TxnSizes {
    pub success: i64,
    pub failure: i64,
    pub values: Vec<usize>,
}

/// A txn without its put values, and their sizes.
pub fn txn_sketch(request: &pb::TxnRequest) -> (pb::TxnRequest, TxnSizes) {
    let mut sizes = TxnSizes {
        success: request.success.iter().map(size).sum(),
        failure: request.failure.iter().map(size).sum(),
        values: Vec::new(),
    };
    let mut sketch = pb::TxnRequest {
        compare: request.compare.clone(),
        success: Vec::with_capacity(request.success.len()),
        failure: Vec::with_capacity(request.failure.len()),
    };
    for (from, to) in [
        (&request.success, &mut sketch.success),
        (&request.failure, &mut sketch.failure),
    ] {
        for op in from {
            to.push(op_sketch(op, &mut sizes.values));
        }
    }
    (sketch, sizes)
}

fn op_sketch(op: &pb::RequestOp, values: &mut Vec<usize>) -> pb::RequestOp {
    use pb::request_op::Request as Op;
    let request = match &op.request {
        Some(Op::RequestPut(put)) => {
            values.push(put.value.len());
            Some(Op::RequestPut(without_value(put)))
        }
        Some(Op::RequestTxn(txn)) => {
            let (inner, inner_sizes) = txn_sketch(txn);
            values.extend(inner_sizes.values);
            Some(Op::RequestTxn(inner))
        }
        other => other.clone(),
    };
    pb::RequestOp { request }
}

fn without_value(put: &pb::PutRequest) -> pb::PutRequest {
    pb::PutRequest {
        key: put.key.clone(),
        value: Vec::new(),
        lease: put.lease,
        prev_kv: put.prev_kv,
        ignore_value: put.ignore_value,
        ignore_lease: put.ignore_lease,
    }
}

/// How a text form quotes bytes: etcd's loggable put and value compare
/// use the legacy text marshaler (octal escapes), everything else
/// protobuf-go's text form (hex escapes, UTF-8 as it is).
#[derive(Clone, Copy)]
enum Quote {
    Legacy,
    Text,
}

/// Go's quoting of bytes in protobuf text, in `style`.
fn quoted(bytes: &[u8], style: Quote) -> String {
    let mut text = String::with_capacity(bytes.len() + 2);
    text.push('"');
    let mut rest = bytes;
    while let Some((&byte, tail)) = rest.split_first() {
        let utf8_len = match style {
            Quote::Text => utf8_char_len(rest),
            Quote::Legacy => 0,
        };
        if utf8_len > 1 {
            text.push_str(std::str::from_utf8(&rest[..utf8_len]).unwrap_or_default());
            rest = &rest[utf8_len..];
            continue;
        }
        match byte {
            b'"' => text.push_str("\\\""),
            b'\\' => text.push_str("\\\\"),
            b'\n' => text.push_str("\\n"),
            b'\r' => text.push_str("\\r"),
            b'\t' => text.push_str("\\t"),
            0x20..=0x7e => text.push(byte as char),
            _ => {
                let _ = match style {
                    Quote::Legacy => write!(text, "\\{byte:03o}"),
                    Quote::Text => write!(text, "\\x{byte:02x}"),
                };
            }
        }
        rest = tail;
    }
    text.push('"');
    text
}

/// The length of the multi-byte UTF-8 character `bytes` starts with, or
/// 0 if they do not start with one.
fn utf8_char_len(bytes: &[u8]) -> usize {
    let width = match bytes.first() {
        Some(0xc2..=0xdf) => 2,
        Some(0xe0..=0xef) => 3,
        Some(0xf0..=0xf4) => 4,
        _ => return 0,
    };
    match bytes.get(..width).map(std::str::from_utf8) {
        Some(Ok(_)) => width,
        _ => 0,
    }
}

/// Appends `name:value ` when `value` is not its default.
fn field(text: &mut String, name: &str, value: impl std::fmt::Display, set: bool) {
    if set {
        let _ = write!(text, "{name}:{value} ");
    }
}

/// The `key` and `range_end` fields that open a range's and a delete's
/// text form.
fn key_range_text(key: &[u8], range_end: &[u8]) -> String {
    let mut text = String::new();
    field(&mut text, "key", quoted(key, Quote::Text), !key.is_empty());
    field(
        &mut text,
        "range_end",
        quoted(range_end, Quote::Text),
        !range_end.is_empty(),
    );
    text
}

fn range_text(request: &pb::RangeRequest) -> String {
    let mut text = key_range_text(&request.key, &request.range_end);
    field(&mut text, "limit", request.limit, request.limit != 0);
    field(&mut text, "revision", request.revision, request.revision != 0);
    let order = pb::range_request::SortOrder::try_from(request.sort_order).map_or("NONE", |o| o.as_str_name());
    field(&mut text, "sort_order", order, request.sort_order != 0);
    let target = pb::range_request::SortTarget::try_from(request.sort_target).map_or("KEY", |t| t.as_str_name());
    field(&mut text, "sort_target", target, request.sort_target != 0);
    field(&mut text, "serializable", true, request.serializable);
    field(&mut text, "keys_only", true, request.keys_only);
    field(&mut text, "count_only", true, request.count_only);
    for (name, value) in [
        ("min_mod_revision", request.min_mod_revision),
        ("max_mod_revision", request.max_mod_revision),
        ("min_create_revision", request.min_create_revision),
        ("max_create_revision", request.max_create_revision),
    ] {
        field(&mut text, name, value, value != 0);
    }
    text.truncate(text.trim_end().len());
    text
}

fn put_text(request: &pb::PutRequest, value_size: usize) -> String {
    let mut text = String::new();
    field(
        &mut text,
        "key",
        quoted(&request.key, Quote::Legacy),
        !request.key.is_empty(),
    );
    field(&mut text, "value_size", value_size, value_size != 0);
    field(&mut text, "lease", request.lease, request.lease != 0);
    field(&mut text, "prev_kv", true, request.prev_kv);
    field(&mut text, "ignore_value", true, request.ignore_value);
    field(&mut text, "ignore_lease", true, request.ignore_lease);
    text
}

fn delete_text(request: &pb::DeleteRangeRequest) -> String {
    let mut text = key_range_text(&request.key, &request.range_end);
    field(&mut text, "prev_kv", true, request.prev_kv);
    text.truncate(text.trim_end().len());
    text
}

/// A compare as etcd 3.7.3 logs it: a value compare in the legacy text
/// form with the value's size (fields in its own order, a blank after
/// each), any other in protobuf-go's text form.
fn compare_text(compare: &pb::Compare) -> String {
    use pb::compare::TargetUnion;
    let mut text = String::new();
    let value = matches!(compare.target_union, Some(TargetUnion::Value(_)));
    let style = if value { Quote::Legacy } else { Quote::Text };
    let result = pb::compare::CompareResult::try_from(compare.result).map_or("EQUAL", |r| r.as_str_name());
    field(&mut text, "result", result, compare.result != 0);
    let target = pb::compare::CompareTarget::try_from(compare.target).map_or("VERSION", |t| t.as_str_name());
    field(&mut text, "target", target, compare.target != 0);
    field(&mut text, "key", quoted(&compare.key, style), !compare.key.is_empty());
    match &compare.target_union {
        Some(TargetUnion::Version(v)) => field(&mut text, "version", v, true),
        Some(TargetUnion::CreateRevision(v)) => field(&mut text, "create_revision", v, true),
        Some(TargetUnion::ModRevision(v)) => field(&mut text, "mod_revision", v, true),
        Some(TargetUnion::Value(v)) => field(&mut text, "value_size", v.len(), !v.is_empty()),
        Some(TargetUnion::Lease(v)) => field(&mut text, "lease", v, true),
        None => {}
    }
    let range_end = quoted(&compare.range_end, style);
    field(&mut text, "range_end", range_end, !compare.range_end.is_empty());
    if !value {
        text.truncate(text.trim_end().len());
    }
    text
}

fn op_text(op: &pb::RequestOp, values: &mut std::slice::Iter<'_, usize>) -> String {
    use pb::request_op::Request as Op;
    match &op.request {
        Some(Op::RequestRange(range)) => format!("request_range:{{{}}}", range_text(range)),
        Some(Op::RequestPut(put)) => {
            let size = values.next().copied().unwrap_or(0);
            format!("request_put:<{}>", put_text(put, size))
        }
        Some(Op::RequestDeleteRange(delete)) => format!("request_delete_range:{{{}}}", delete_text(delete)),
        Some(Op::RequestTxn(txn)) => format!("request_txn:<{}>", txn_text_with(txn, values)),
        None => String::new(),
    }
}

fn txn_text(request: &pb::TxnRequest, values: &[usize]) -> String {
    txn_text_with(request, &mut values.iter())
}

/// etcd 3.7.3's loggable txn: the three lists, each in `<>` and always
/// there, their items spaced by one blank.
fn txn_text_with(request: &pb::TxnRequest, values: &mut std::slice::Iter<'_, usize>) -> String {
    let compare: Vec<String> = request.compare.iter().map(compare_text).collect();
    let success: Vec<String> = request.success.iter().map(|op| op_text(op, values)).collect();
    let failure: Vec<String> = request.failure.iter().map(|op| op_text(op, values)).collect();
    format!(
        "compare:<{}> success:<{}> failure:<{}>",
        compare.join(" "),
        success.join(" "),
        failure.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the content is protobuf's compact text, values left out.
    #[test]
    fn content_as_etcd_writes_it() {
        let range = pb::RangeRequest {
            key: b"/registry/pods/".to_vec(),
            range_end: b"/registry/pods0".to_vec(),
            limit: 500,
            ..Default::default()
        };
        assert_eq!(
            range_text(&range),
            r#"key:"/registry/pods/" range_end:"/registry/pods0" limit:500"#
        );
        let put = pb::PutRequest {
            key: b"k\x01".to_vec(),
            value: vec![7; 42],
            ..Default::default()
        };
        let (sketch, value_size) = put_sketch(&put);
        assert!(sketch.value.is_empty());
        assert_eq!(put_text(&sketch, value_size), r#"key:"k\001" value_size:42 "#);
        assert_eq!(quoted("é\x01".as_bytes(), Quote::Text), r#""é\x01""#);
        let txn = pb::TxnRequest {
            compare: vec![pb::Compare {
                target: pb::compare::CompareTarget::Mod as i32,
                key: b"a".to_vec(),
                target_union: Some(pb::compare::TargetUnion::ModRevision(5)),
                ..Default::default()
            }],
            success: vec![pb::RequestOp {
                request: Some(pb::request_op::Request::RequestPut(put.clone())),
            }],
            failure: vec![pb::RequestOp {
                request: Some(pb::request_op::Request::RequestRange(pb::RangeRequest {
                    key: b"a".to_vec(),
                    ..Default::default()
                })),
            }],
        };
        let two = pb::TxnRequest {
            compare: vec![txn.compare[0].clone(), txn.compare[0].clone()],
            ..Default::default()
        };
        assert_eq!(
            txn_text(&two, &[]),
            r#"compare:<target:MOD key:"a" mod_revision:5 target:MOD key:"a" mod_revision:5> success:<> failure:<>"#
        );
        let (sketch, sizes) = txn_sketch(&txn);
        assert_eq!(sizes.values, [42]);
        assert_eq!(sizes.success, size(&txn.success[0]));
        assert_eq!(
            txn_text(&sketch, &sizes.values),
            r#"compare:<target:MOD key:"a" mod_revision:5> success:<request_put:<key:"k\001" value_size:42 >> failure:<request_range:{key:"a"}>"#
        );
    }
}
