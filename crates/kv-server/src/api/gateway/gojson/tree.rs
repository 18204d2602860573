//! A value already found whole, parsed into a tree that keeps each
//! value's raw text, and Go's unquoting of strings.

use super::*;

/// A JSON value whose text is known to be valid, with the text of each
/// part kept: `raw` is exactly the value's bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Number(&'a [u8]),
    /// A string, still quoted and escaped.
    String(&'a [u8]),
    Array(Vec<Json<'a>>),
    /// Members in the text's order; a key may appear more than once.
    Object(Vec<(String, Json<'a>)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Json<'a> {
    pub raw: &'a [u8],
    pub value: Value<'a>,
}

impl<'a> Json<'a> {
    /// What Go's type errors call this kind of value.
    pub fn kind(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// The last member named `key`, as a Go map keeps it.
    pub fn member(&self, key: &str) -> Option<&Json<'a>> {
        match &self.value {
            Value::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// The tree of `text`, which [`next_value`] or [`check_valid`] found to be
/// one valid value (leading and trailing space allowed).
pub fn parse(text: &[u8]) -> Json<'_> {
    let mut parser = Parser { text, at: 0 };
    parser.value()
}

pub(super) struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn skip_space(&mut self) {
        while self.at < self.text.len() && is_space(self.text[self.at]) {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Json<'a> {
        self.skip_space();
        let start = self.at;
        let value = match self.text[self.at] {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => {
                self.skip_string();
                Value::String(&self.text[start..self.at])
            }
            b't' => {
                self.at += 4;
                Value::Bool(true)
            }
            b'f' => {
                self.at += 5;
                Value::Bool(false)
            }
            b'n' => {
                self.at += 4;
                Value::Null
            }
            _ => {
                while self.at < self.text.len()
                    && matches!(self.text[self.at], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    self.at += 1;
                }
                Value::Number(&self.text[start..self.at])
            }
        };
        Json {
            raw: &self.text[start..self.at],
            value,
        }
    }

    /// An object, from its opening brace.
    fn object(&mut self) -> Value<'a> {
        self.at += 1;
        let mut members = Vec::new();
        loop {
            self.skip_space();
            if self.text[self.at] == b'}' {
                self.at += 1;
                return Value::Object(members);
            }
            if self.text[self.at] == b',' {
                self.at += 1;
                self.skip_space();
            }
            let key_start = self.at;
            self.skip_string();
            let key = unquote(&self.text[key_start..self.at]);
            self.skip_space();
            self.at += 1; // ':'
            members.push((key, self.value()));
        }
    }

    /// An array, from its opening bracket.
    fn array(&mut self) -> Value<'a> {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            self.skip_space();
            match self.text[self.at] {
                b']' => {
                    self.at += 1;
                    return Value::Array(items);
                }
                b',' => self.at += 1,
                _ => items.push(self.value()),
            }
        }
    }

    /// Past a string starting at `at` (its opening quote).
    fn skip_string(&mut self) {
        self.at += 1;
        while self.text[self.at] != b'"' {
            self.at += if self.text[self.at] == b'\\' { 2 } else { 1 };
        }
        self.at += 1;
    }
}

/// The four hex digits at the front of `s` (after `\u`), as Go's `getu4`.
pub(super) fn hex4(s: &[u8]) -> Option<u32> {
    if s.len() < 6 || s[0] != b'\\' || s[1] != b'u' {
        return None;
    }
    std::str::from_utf8(&s[2..6])
        .ok()
        .and_then(|h| u32::from_str_radix(h, 16).ok())
}

/// A quoted string's text, as Go's `unquote` makes it: escapes read,
/// bad surrogates and each byte of invalid UTF-8 made U+FFFD.
pub fn unquote(quoted: &[u8]) -> String {
    let s = &quoted[1..quoted.len() - 1];
    let mut out = String::with_capacity(s.len());
    let mut r = 0;
    while r < s.len() {
        let c = s[r];
        if c == b'\\' {
            let escaped = s[r + 1];
            r += 2;
            match escaped {
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let first = hex4(&s[r - 2..]).unwrap_or(0xfffd);
                    r += 4;
                    if (0xd800..0xe000).contains(&first) {
                        let paired = hex4(&s[r..])
                            .filter(|second| (0xdc00..0xe000).contains(second) && first < 0xdc00)
                            .map(|second| 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00));
                        match paired.and_then(char::from_u32) {
                            Some(c) => {
                                out.push(c);
                                r += 6;
                            }
                            None => out.push('\u{fffd}'),
                        }
                    } else {
                        out.push(char::from_u32(first).unwrap_or('\u{fffd}'));
                    }
                }
                other => out.push(char::from(other)),
            }
        } else if c < 0x80 {
            out.push(char::from(c));
            r += 1;
        } else {
            let (decoded, size) = decode_rune(&s[r..]);
            out.push(decoded);
            r += size;
        }
    }
    out
}

/// Go's `utf8.DecodeRune`: the rune at the front of `s` and its length,
/// or U+FFFD and 1 for a byte that does not start a valid rune.
pub(super) fn decode_rune(s: &[u8]) -> (char, usize) {
    let want = match s[0] {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return ('\u{fffd}', 1),
    };
    match s.get(..want).and_then(|bytes| std::str::from_utf8(bytes).ok()) {
        Some(text) => (text.chars().next().expect("one rune"), want),
        None => ('\u{fffd}', 1),
    }
}
