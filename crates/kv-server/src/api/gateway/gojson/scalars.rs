//! `json.Unmarshal` of one value into a Go integer, float, bool, string
//! or byte slice, with Go's type errors and its standard base64.

use super::*;

/// Go's message for a value of kind `kind` that cannot go into a Go
/// value of type `go_type`.
pub fn type_error(kind: &str, go_type: &str) -> String {
    format!("json: cannot unmarshal {kind} into Go value of type {go_type}")
}

/// `json.Unmarshal(text, &n)` for a Go integer of type `go_type`
/// (`int64`, `int32`, `uint64`, `uint32`, `protoreflect.EnumNumber`)
/// whose range is `min..=max`; null leaves it 0.
pub(super) fn to_integer(text: &[u8], go_type: &str, min: i128, max: i128) -> Result<i128, String> {
    check_valid(text)?;
    let json = parse(text);
    match json.value {
        Value::Null => Ok(0),
        Value::Number(digits) => {
            let digits = std::str::from_utf8(digits).expect("numbers are ASCII");
            digits
                .parse::<i128>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| type_error(&format!("number {digits}"), go_type))
        }
        _ => Err(type_error(json.kind(), go_type)),
    }
}

pub fn to_i64(text: &[u8]) -> Result<i64, String> {
    to_integer(text, "int64", i64::MIN.into(), i64::MAX.into()).map(|n| n as i64)
}

pub fn to_u64(text: &[u8]) -> Result<u64, String> {
    to_integer(text, "uint64", 0, u64::MAX.into()).map(|n| n as u64)
}

pub fn to_i32(text: &[u8], go_type: &str) -> Result<i32, String> {
    to_integer(text, go_type, i32::MIN.into(), i32::MAX.into()).map(|n| n as i32)
}

pub fn to_u32(text: &[u8]) -> Result<u32, String> {
    to_integer(text, "uint32", 0, u32::MAX.into()).map(|n| n as u32)
}

/// `json.Unmarshal(text, &b)` for a Go bool.
pub fn to_bool(text: &[u8]) -> Result<bool, String> {
    check_valid(text)?;
    let json = parse(text);
    match json.value {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(b),
        _ => Err(type_error(json.kind(), "bool")),
    }
}

/// `json.Unmarshal(text, &s)` for a Go string.
pub fn to_string(text: &[u8]) -> Result<String, String> {
    check_valid(text)?;
    let json = parse(text);
    match json.value {
        Value::Null => Ok(String::new()),
        Value::String(quoted) => Ok(unquote(quoted)),
        _ => Err(type_error(json.kind(), "string")),
    }
}

/// `json.Unmarshal(text, &b)` for a Go `[]byte`: base64 in a string, or
/// an array of numbers each a byte.
pub fn to_bytes(text: &[u8]) -> Result<Vec<u8>, String> {
    check_valid(text)?;
    let json = parse(text);
    match &json.value {
        Value::Null => Ok(Vec::new()),
        Value::String(quoted) => base64_decode(unquote(quoted).as_bytes()),
        Value::Array(items) => items
            .iter()
            .map(|item| to_integer(item.raw, "uint8", 0, 255).map(|n| n as u8))
            .collect(),
        _ => Err(type_error(json.kind(), "[]uint8")),
    }
}

/// The standard alphabet's value of each byte, or 0xff.
pub(super) const BASE64_VALUES: [u8; 256] = {
    let mut table = [0xffu8; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};

pub(super) fn corrupt(at: usize) -> String {
    format!("illegal base64 data at input byte {at}")
}

/// Go's `base64.StdEncoding.Decode`: padding required, `\r` and `\n`
/// skipped, and Go's error at the first bad byte.
pub fn base64_decode(src: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    while si < src.len() {
        let mut quantum = [0u8; 4];
        let mut len = 4;
        let mut j = 0;
        let mut trailing = None;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(corrupt(si - j));
            }
            let byte = src[si];
            si += 1;
            let value = BASE64_VALUES[byte as usize];
            if value != 0xff {
                quantum[j] = value;
                j += 1;
                continue;
            }
            if byte == b'\n' || byte == b'\r' {
                continue;
            }
            if byte != b'=' {
                return Err(corrupt(si - 1));
            }
            match j {
                0 | 1 => return Err(corrupt(si - 1)),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(corrupt(src.len()));
                    }
                    if src[si] != b'=' {
                        return Err(corrupt(si - 1));
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                trailing = Some(si);
            }
            len = j;
            break;
        }
        let bits = u32::from(quantum[0]) << 18
            | u32::from(quantum[1]) << 12
            | u32::from(quantum[2]) << 6
            | u32::from(quantum[3]);
        let bytes = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
        out.extend_from_slice(&bytes[..len - 1]);
        if let Some(at) = trailing {
            return Err(corrupt(at));
        }
        if len < 4 {
            return Ok(out);
        }
    }
    Ok(out)
}

/// `json.Unmarshal(text, &f)` for a Go float (`float32` or `float64`),
/// with jsonpb's names for the values JSON has no number for.
pub fn to_f64(text: &[u8], go_type: &str) -> Result<f64, String> {
    match text {
        b"NaN" => return Ok(f64::NAN),
        b"Infinity" => return Ok(f64::INFINITY),
        b"-Infinity" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    check_valid(text)?;
    let json = parse(text);
    match json.value {
        Value::Null => Ok(0.0),
        Value::Number(digits) => {
            let digits = std::str::from_utf8(digits).expect("numbers are ASCII");
            digits
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && (go_type != "float32" || n.abs() <= f64::from(f32::MAX)))
                .ok_or_else(|| type_error(&format!("number {digits}"), go_type))
        }
        _ => Err(type_error(json.kind(), go_type)),
    }
}
