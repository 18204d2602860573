//! etcd's JSON mapping of its protobuf messages, driven by the messages'
//! descriptors (`etcd_proto::FILE_DESCRIPTOR_SET`, read by prost-reflect),
//! so every message of every service maps the same way and none is
//! written by hand.
//!
//! The mapping is the one etcd 3.5's gateway uses (golang/protobuf's
//! `jsonpb`, with the proto's own field names):
//! - **Written:** fields in declaration order under their proto names
//!   (`create_revision`, `dbSize`, `grantedTTL`); fields at their default
//!   left out (a oneof's chosen field always written); 64-bit integers as
//!   decimal strings; bytes as padded standard base64; enums by name;
//!   strings escaped as Go escapes them.
//! - **Read:** a field under its proto name or its JSON name (the JSON
//!   name wins when both are given); integers as numbers or as strings
//!   holding one; enums by name or number; bytes as base64; `null` for
//!   "not given"; unknown fields ignored. Errors are Go's texts
//!   (`gojson`), which etcd's gateway returns as they are.

use std::sync::LazyLock;

use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, ReflectMessage, Value as Field,
};

use crate::api::gateway::gojson::{self, Json, Value};

/// Every message of etcd's protos (and this project's), by full name.
pub static DESCRIPTORS: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(etcd_proto::FILE_DESCRIPTOR_SET).expect("the build wrote a valid descriptor set")
});

/// The descriptor of message `full_name` (`etcdserverpb.RangeRequest`).
pub fn message(full_name: &str) -> MessageDescriptor {
    DESCRIPTORS
        .get_message_by_name(full_name)
        .unwrap_or_else(|| panic!("{full_name} is in the descriptor set"))
}

/// A message of type `descriptor` from `json` (one whole value), as
/// jsonpb reads it; Go's error text if it cannot be read.
pub fn decode(descriptor: &MessageDescriptor, json: &Json<'_>) -> Result<DynamicMessage, String> {
    let mut message = DynamicMessage::new(descriptor.clone());
    match &json.value {
        Value::Null => return Ok(message),
        Value::Object(_) => {}
        _ => return Err(gojson::type_error(json.kind(), "map[string]json.RawMessage")),
    }
    for field in descriptor.fields() {
        // As jsonpb: the proto name, then the JSON name, which wins.
        let given = [field.json_name(), field.name()]
            .into_iter()
            .find_map(|name| json.member(name));
        let Some(given) = given else { continue };
        if given.value == Value::Null {
            continue;
        }
        let value = if field.is_list() {
            let Value::Array(items) = &given.value else {
                return Err(gojson::type_error(given.kind(), "[]json.RawMessage"));
            };
            Field::List(
                items
                    .iter()
                    .map(|item| singular(&field, item))
                    .collect::<Result<_, _>>()?,
            )
        } else {
            singular(&field, given)?
        };
        message.set_field(&field, value);
    }
    Ok(message)
}

/// golang/protobuf's `trimQuote`: a quoted text without its quotes, so
/// that `"12"` reads as the number 12.
fn trim_quote(raw: &[u8]) -> &[u8] {
    if raw.len() >= 2 && raw[0] == b'"' && raw[raw.len() - 1] == b'"' {
        &raw[1..raw.len() - 1]
    } else {
        raw
    }
}

/// One value of `field` (one element, for a list).
fn singular(field: &FieldDescriptor, json: &Json<'_>) -> Result<Field, String> {
    let raw = json.raw;
    Ok(match field.kind() {
        Kind::Bool => Field::Bool(gojson::to_bool(raw)?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Field::I32(gojson::to_i32(trim_quote(raw), "int32")?),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Field::I64(gojson::to_i64(trim_quote(raw))?),
        Kind::Uint32 | Kind::Fixed32 => Field::U32(gojson::to_u32(trim_quote(raw))?),
        Kind::Uint64 | Kind::Fixed64 => Field::U64(gojson::to_u64(trim_quote(raw))?),
        Kind::Float => Field::F32(gojson::to_f64(trim_quote(raw), "float32")? as f32),
        Kind::Double => Field::F64(gojson::to_f64(trim_quote(raw), "float64")?),
        Kind::String => Field::String(gojson::to_string(raw)?),
        Kind::Bytes => Field::Bytes(gojson::to_bytes(raw)?.into()),
        Kind::Enum(enumeration) => {
            if raw.len() >= 2 && raw[0] == b'"' && raw[raw.len() - 1] == b'"' {
                let name = String::from_utf8_lossy(&raw[1..raw.len() - 1]);
                match enumeration.get_value_by_name(&name) {
                    Some(value) => Field::EnumNumber(value.number()),
                    None => {
                        return Err(format!(
                            "unknown value {} for enum {}",
                            gojson::go_quote(raw),
                            enumeration.full_name()
                        ))
                    }
                }
            } else {
                Field::EnumNumber(gojson::to_i32(raw, "protoreflect.EnumNumber")?)
            }
        }
        Kind::Message(descriptor) => Field::Message(decode(&descriptor, json)?),
    })
}

/// `message` (prost-encoded bytes of type `descriptor`) written as jsonpb
/// writes it, appended to `out`.
pub fn encode(descriptor: &MessageDescriptor, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), prost::DecodeError> {
    let message = DynamicMessage::decode(descriptor.clone(), bytes)?;
    write_message(&message, out);
    Ok(())
}

fn write_message(message: &DynamicMessage, out: &mut Vec<u8>) {
    out.push(b'{');
    let mut first = true;
    let mut oneofs_written = Vec::new();
    for field in message.descriptor().fields() {
        // A oneof is written where its first field is declared, as the
        // field it holds.
        let field = match field.containing_oneof() {
            Some(oneof) if oneofs_written.contains(&oneof) => continue,
            Some(oneof) => {
                oneofs_written.push(oneof.clone());
                match oneof.fields().find(|member| message.has_field(member)) {
                    Some(chosen) => chosen,
                    None => continue,
                }
            }
            None if message.has_field(&field) => field,
            None => continue,
        };
        if !first {
            out.push(b',');
        }
        first = false;
        out.push(b'"');
        out.extend_from_slice(field.name().as_bytes());
        out.extend_from_slice(b"\":");
        write_value(&field, &message.get_field(&field), out);
    }
    out.push(b'}');
}

fn write_value(field: &FieldDescriptor, value: &Field, out: &mut Vec<u8>) {
    use std::io::Write;
    match value {
        Field::List(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(field, item, out);
            }
            out.push(b']');
        }
        Field::Message(message) => write_message(message, out),
        Field::EnumNumber(number) => match field.kind() {
            Kind::Enum(enumeration) => match enumeration.get_value(*number) {
                Some(value) => {
                    out.push(b'"');
                    out.extend_from_slice(value.name().as_bytes());
                    out.push(b'"');
                }
                None => write!(out, "{number}").expect("writing to a Vec"),
            },
            _ => write!(out, "{number}").expect("writing to a Vec"),
        },
        Field::I64(n) => write!(out, "\"{n}\"").expect("writing to a Vec"),
        Field::U64(n) => write!(out, "\"{n}\"").expect("writing to a Vec"),
        Field::I32(n) => write!(out, "{n}").expect("writing to a Vec"),
        Field::U32(n) => write!(out, "{n}").expect("writing to a Vec"),
        Field::F32(n) => gojson::write_float(out, f64::from(*n), 32),
        Field::F64(n) => gojson::write_float(out, *n, 64),
        Field::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Field::String(s) => gojson::write_string(out, s),
        Field::Bytes(bytes) => {
            out.push(b'"');
            gojson::base64_encode(bytes, out);
            out.push(b'"');
        }
        // etcd's protos have no maps.
        Field::Map(_) => out.extend_from_slice(b"{}"),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::etcdserverpb as pb;

    fn read<T: Message + Default>(name: &str, text: &str) -> Result<T, String> {
        gojson::check_valid(text.as_bytes()).unwrap();
        let message = decode(&message(name), &gojson::parse(text.as_bytes()))?;
        Ok(T::decode(message.encode_to_vec().as_slice()).unwrap())
    }

    fn write(name: &str, message: &impl Message) -> String {
        let mut out = Vec::new();
        encode(&self::message(name), &message.encode_to_vec(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn requests_read_in_either_naming_with_numbers_as_strings() {
        let range: pb::RangeRequest = read(
            "etcdserverpb.RangeRequest",
            r#"{"key":"Zm9v","rangeEnd":"Zm9w","limit":"5","revision":3,"sort_order":"DESCEND","sortTarget":2,"keys_only":true,"unknown":1}"#,
        )
        .unwrap();
        assert_eq!(range.key, b"foo");
        assert_eq!(range.range_end, b"fop");
        assert_eq!((range.limit, range.revision), (5, 3));
        assert_eq!((range.sort_order, range.sort_target), (2, 2));
        assert!(range.keys_only);
        // The JSON name wins over the proto name, as in jsonpb.
        let put: pb::PutRequest = read("etcdserverpb.PutRequest", r#"{"prevKv":true,"prev_kv":false}"#).unwrap();
        assert!(put.prev_kv);
    }

    #[test]
    fn bad_requests_get_gos_errors() {
        let cases = [
            (r#"{"key":"!!!"}"#, "illegal base64 data at input byte 0"),
            (
                r#"{"limit":"x"}"#,
                "invalid character 'x' looking for beginning of value",
            ),
            (
                r#"{"limit":1.5}"#,
                "json: cannot unmarshal number 1.5 into Go value of type int64",
            ),
            (
                r#"{"keys_only":"true"}"#,
                "json: cannot unmarshal string into Go value of type bool",
            ),
            (
                r#"{"sort_order":"UP"}"#,
                r#"unknown value "\"UP\"" for enum etcdserverpb.RangeRequest.SortOrder"#,
            ),
            (
                "[1]",
                "json: cannot unmarshal array into Go value of type map[string]json.RawMessage",
            ),
        ];
        for (text, want) in cases {
            let got = read::<pb::RangeRequest>("etcdserverpb.RangeRequest", text).unwrap_err();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn responses_write_as_jsonpb_with_proto_names() {
        let range = pb::RangeResponse {
            header: Some(pb::ResponseHeader {
                cluster_id: 1,
                member_id: 2,
                revision: 3,
                raft_term: 0,
            }),
            kvs: vec![crate::proto::mvccpb::KeyValue {
                key: b"foo".to_vec(),
                create_revision: 2,
                mod_revision: 3,
                version: 1,
                value: b"<b>".to_vec(),
                lease: 0,
            }],
            more: false,
            count: 1,
        };
        assert_eq!(
            write("etcdserverpb.RangeResponse", &range),
            r#"{"header":{"cluster_id":"1","member_id":"2","revision":"3"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"1","value":"PGI+"}],"count":"1"}"#
        );
        let txn = pb::TxnRequest {
            compare: vec![pb::Compare {
                result: 0,
                target: 1,
                key: b"k".to_vec(),
                target_union: Some(pb::compare::TargetUnion::CreateRevision(0)),
                range_end: Vec::new(),
            }],
            ..Default::default()
        };
        // A oneof's chosen field is written even at its default; an enum
        // at its default is not.
        assert_eq!(
            write("etcdserverpb.TxnRequest", &txn),
            r#"{"compare":[{"target":"CREATE","key":"aw==","create_revision":"0"}]}"#
        );
    }
}
