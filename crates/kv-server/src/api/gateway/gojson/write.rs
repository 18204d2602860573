//! Values written as `json.Marshal` writes them: strings escaped, floats
//! formatted, bytes in base64.

use super::*;

/// A float as jsonpb writes it: NaN and the infinities by name, others
/// as the shortest decimal that reads back the same.
pub fn write_float(out: &mut Vec<u8>, n: f64, bits: u32) {
    use std::io::Write;
    let written = if n.is_nan() {
        write!(out, "\"NaN\"")
    } else if n.is_infinite() {
        write!(out, "\"{}Infinity\"", if n < 0.0 { "-" } else { "" })
    } else if bits == 32 {
        write!(out, "{}", n as f32)
    } else {
        write!(out, "{n}")
    };
    written.expect("writing to a Vec");
}

/// Bytes as Go's `base64.StdEncoding` writes them (padded).
pub fn base64_encode(bytes: &[u8], out: &mut Vec<u8>) {
    use base64::Engine;
    let start = out.len();
    out.resize(start + bytes.len().div_ceil(3) * 4, 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[start..])
        .expect("room for the encoding");
    out.truncate(start + written);
}

/// Go's `%q` of a text: quoted, with Go's escapes.
pub fn go_quote(text: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut at = 0;
    while at < text.len() {
        let (c, size) = if text[at] < 0x80 {
            (char::from(text[at]), 1)
        } else {
            decode_rune(&text[at..])
        };
        if c == '\u{fffd}' && size == 1 && text[at] >= 0x80 {
            out.push_str(&format!(r"\x{:02x}", text[at]));
        } else if (c as u32) < 0x100 {
            out.push_str(&go_quote_rune(c));
        } else if c.is_control() {
            out.push_str(&format!(r"\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
        at += size;
    }
    out.push('"');
    out
}

/// Bytes `json.Marshal` writes as they are (with HTML escaping on).
pub(super) fn html_safe(b: u8) -> bool {
    (0x20..0x80).contains(&b) && !matches!(b, b'"' | b'\\' | b'<' | b'>' | b'&')
}

pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

/// `s` as Go's `json.Marshal` writes a string: quoted, with `<`, `>`
/// and `&` escaped, control bytes as `\u00XX` (or their short escapes),
/// U+2028 and U+2029 escaped.
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        let code = c as u32;
        if code < 0x80 {
            let b = code as u8;
            if html_safe(b) {
                out.push(b);
                continue;
            }
            match b {
                b'\\' | b'"' => out.extend_from_slice(&[b'\\', b]),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                _ => out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]]),
            }
        } else if c == '\u{2028}' || c == '\u{2029}' {
            out.extend_from_slice(&[b'\\', b'u', b'2', b'0', b'2', HEX[(code & 0xf) as usize]]);
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    out.push(b'"');
}
