//! JSON read and written as Go's `encoding/json` reads and writes it, the
//! library under etcd's gateway: the same values taken and refused, and
//! the same error texts, which a client of etcd's gateway sees verbatim
//! (`{"error":"invalid character 'x' looking for beginning of value",…}`).
//!
//! - [`next_value`]: the next whole value of a request body, as Go's
//!   `json.Decoder` finds it (a stream body carries several, one after
//!   another).
//! - [`parse`]: a value already found whole, as a tree that keeps each
//!   value's raw text (etcd's JSON mapping reads numbers from it).
//! - [`check_valid`]: a whole text, as `json.Unmarshal` checks it first.
//! - The scalar readers ([`to_i64`] and the others): `json.Unmarshal`
//!   of one value into a Go integer, bool, string or byte slice, with
//!   Go's type errors; [`base64_decode`] is Go's standard decoding.
//! - [`write_string`]: a string escaped as `json.Marshal` escapes it.
//!
//! The scanner is a port of Go's state machine (`encoding/json/scanner.go`
//! of Go 1.26, which etcd 3.5.17 is built with here): its states and its
//! messages are facts of the format clients see, so they are kept one for
//! one.
//!
//! Files: [`scanner`] (the state machine, `check_valid`, `next_value`),
//! [`tree`] (`parse`, `unquote`), [`scalars`] (the `to_*` readers,
//! base64) and [`write`] (`write_string` and the other writers).

mod scalars;
mod scanner;
mod tree;
mod write;

pub use scalars::*;
pub use scanner::*;
pub use tree::*;
pub use write::*;

/// The deepest nesting of objects and arrays read. Go's decoder allows
/// 10,000 (`maxNestingDepth`) on its growable stacks; this reader and
/// the mapping to messages recurse once per level on a worker thread's
/// fixed stack, so the bound is lower: 512 levels is past any message
/// etcd takes (prost refuses messages nested deeper than 100, and JSON
/// nests a message in at most three levels) and a few hundred KiB of
/// stack. Deeper input gets Go's own error at its bound.
pub const NESTING_MAX: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each text and Go 1.26's `json.Unmarshal(text, &map[string]any{})`
    /// syntax error for it (checked against Go).
    #[test]
    fn syntax_errors_are_gos() {
        let cases: &[(&str, &str)] = &[
            (
                "{bad",
                "invalid character 'b' looking for beginning of object key string",
            ),
            ("{\"a\" 1}", "invalid character '1' after object key"),
            ("{\"a\":1 2}", "invalid character '2' after object key:value pair"),
            ("[1 2]", "invalid character '2' after array element"),
            ("x", "invalid character 'x' looking for beginning of value"),
            ("{\"a\":tru}", "invalid character '}' in literal true (expecting 'e')"),
            ("{\"a\":nul}", "invalid character '}' in literal null (expecting 'l')"),
            ("{\"a\":-x}", "invalid character 'x' in numeric literal"),
            (
                "{\"a\":1.}",
                "invalid character '}' after decimal point in numeric literal",
            ),
            ("{\"a\":1e}", "invalid character '}' in exponent of numeric literal"),
            ("{\"a\":\"\\x\"}", "invalid character 'x' in string escape code"),
            (
                "{\"a\":\"\\u12g4\"}",
                "invalid character 'g' in \\u hexadecimal character escape",
            ),
            ("{\"a\":\"\t\"}", "invalid character '\\t' in string literal"),
            (
                "{'a':1}",
                "invalid character '\\'' looking for beginning of object key string",
            ),
            ("{\"a\":1}x", "invalid character 'x' after top-level value"),
            ("{\"a\":", "unexpected end of JSON input"),
            ("", "unexpected end of JSON input"),
            ("\u{1}", "invalid character '\\x01' looking for beginning of value"),
        ];
        for (text, want) in cases {
            assert_eq!(check_valid(text.as_bytes()).unwrap_err(), *want, "{text:?}");
        }
        assert!(check_valid(b" {\"a\": [1, -2.5e+3, true, null, \"x\"]} ").is_ok());
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "[".repeat(NESTING_MAX + 1) + &"]".repeat(NESTING_MAX + 1);
        assert_eq!(
            check_valid(deep.as_bytes()).unwrap_err(),
            "invalid character '[' exceeded max depth"
        );
        let fits = "[".repeat(NESTING_MAX) + &"]".repeat(NESTING_MAX);
        assert!(check_valid(fits.as_bytes()).is_ok());
        assert_eq!(parse(fits.as_bytes()).kind(), "array");
    }

    #[test]
    fn a_stream_yields_its_values_in_turn() {
        let body = br#" {"a":1}{"b":[2]} 3"#;
        let Next::Value { start, end } = next_value(body, true).unwrap() else {
            panic!("a value")
        };
        assert_eq!(&body[start..end], br#"{"a":1}"#);
        let rest = &body[end..];
        let Next::Value { start, end: second } = next_value(rest, true).unwrap() else {
            panic!("a value")
        };
        assert_eq!(&rest[start..second], br#"{"b":[2]}"#);
        let rest = &rest[second..];
        assert_eq!(next_value(rest, false).unwrap(), Next::More, "3 may go on");
        let Next::Value { start, end } = next_value(rest, true).unwrap() else {
            panic!("a value")
        };
        assert_eq!(&rest[start..end], b"3");
        assert_eq!(next_value(b"  \n", true).unwrap(), Next::End);
        assert_eq!(next_value(br#"{"a":"#, true).unwrap_err(), "unexpected EOF");
        assert_eq!(next_value(br#"{"a":"#, false).unwrap(), Next::More);
        assert_eq!(
            next_value(b"}", true).unwrap_err(),
            "invalid character '}' looking for beginning of value"
        );
    }

    #[test]
    fn numbers_take_gos_ranges_and_messages() {
        assert_eq!(to_i64(b"12"), Ok(12));
        assert_eq!(to_i64(b" -7 "), Ok(-7));
        assert_eq!(to_i64(b"null"), Ok(0));
        assert_eq!(
            to_i64(b"1.5").unwrap_err(),
            "json: cannot unmarshal number 1.5 into Go value of type int64"
        );
        assert_eq!(
            to_i64(b"9223372036854775808").unwrap_err(),
            "json: cannot unmarshal number 9223372036854775808 into Go value of type int64"
        );
        assert_eq!(
            to_u64(b"-1").unwrap_err(),
            "json: cannot unmarshal number -1 into Go value of type uint64"
        );
        assert_eq!(
            to_i64(b"\"1\"").unwrap_err(),
            "json: cannot unmarshal string into Go value of type int64"
        );
        assert_eq!(to_i64(b"").unwrap_err(), "unexpected end of JSON input");
        assert_eq!(
            to_i64(b"abc").unwrap_err(),
            "invalid character 'a' looking for beginning of value"
        );
        assert_eq!(
            to_bool(b"1").unwrap_err(),
            "json: cannot unmarshal number into Go value of type bool"
        );
        assert_eq!(
            to_string(b"{}").unwrap_err(),
            "json: cannot unmarshal object into Go value of type string"
        );
    }

    #[test]
    fn base64_is_gos_standard_decoding() {
        assert_eq!(to_bytes(br#""Zm9v""#), Ok(b"foo".to_vec()));
        assert_eq!(to_bytes(br#""Zm8=""#), Ok(b"fo".to_vec()));
        assert_eq!(to_bytes(br#""Zg==""#), Ok(b"f".to_vec()));
        assert_eq!(to_bytes(br#""Zm\n9v""#), Ok(b"foo".to_vec()));
        assert_eq!(to_bytes(b"[102,111]"), Ok(b"fo".to_vec()));
        assert_eq!(
            to_bytes(br#""!!!""#).unwrap_err(),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            to_bytes(br#""Zm8""#).unwrap_err(),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            to_bytes(br#""Zg=""#).unwrap_err(),
            "illegal base64 data at input byte 3"
        );
        assert_eq!(
            to_bytes(br#""Zm9v-_""#).unwrap_err(),
            "illegal base64 data at input byte 4"
        );
        assert_eq!(
            to_bytes(br#""Zg==Zg==""#).unwrap_err(),
            "illegal base64 data at input byte 4"
        );
        assert_eq!(
            to_bytes(b"5").unwrap_err(),
            "json: cannot unmarshal number into Go value of type []uint8"
        );
    }

    #[test]
    fn strings_unquote_and_escape_as_go_does() {
        assert_eq!(unquote(br#""a\u00e9\ud83d\ude00\ud800x""#), "a\u{e9}\u{1f600}\u{fffd}x");
        assert_eq!(unquote(b"\"\xff\xc3\xa9\""), "\u{fffd}\u{e9}");
        let mut out = Vec::new();
        write_string(&mut out, "<a&b>\"\\\n\u{1}\u{2028}é");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""\u003ca\u0026b\u003e\"\\\n\u0001\u2028é""#
        );
    }
}
