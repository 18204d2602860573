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

/// The deepest nesting of objects and arrays read. Go's decoder allows
/// 10,000 (`maxNestingDepth`) on its growable stacks; this reader and
/// the mapping to messages recurse once per level on a worker thread's
/// fixed stack, so the bound is lower: 512 levels is past any message
/// etcd takes (prost refuses messages nested deeper than 100, and JSON
/// nests a message in at most three levels) and a few hundred KiB of
/// stack. Deeper input gets Go's own error at its bound.
pub const NESTING_MAX: usize = 512;

/// What one byte did to the scan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Continue,
    BeginLiteral,
    BeginObject,
    ObjectKey,
    ObjectValue,
    EndObject,
    BeginArray,
    ArrayValue,
    EndArray,
    SkipSpace,
    End,
    Error,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    BeginValueOrEmpty,
    BeginValue,
    BeginStringOrEmpty,
    BeginString,
    EndValue,
    EndTop,
    InString,
    InStringEsc,
    InStringEscU(u8),
    Neg,
    One,
    Zero,
    Dot,
    Dot0,
    E,
    ESign,
    E0,
    /// Inside `true`, `false` or `null`: the rest still expected.
    Literal(&'static [u8], &'static str),
    Error,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Parse {
    ObjectKey,
    ObjectValue,
    ArrayValue,
}

/// Go's scanner, one byte at a time.
struct Scanner {
    step: State,
    parse: Vec<Parse>,
    end_top: bool,
    error: Option<String>,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's `quoteChar`: a byte as the scanner's messages show it.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_string(),
        b'"' => "'\"'".to_string(),
        _ => format!("'{}'", go_quote_rune(char::from(c))),
    }
}

/// The inside of Go's `strconv.Quote` of one rune (U+0000 to U+00FF).
fn go_quote_rune(c: char) -> String {
    match c {
        '\u{7}' => r"\a".into(),
        '\u{8}' => r"\b".into(),
        '\u{c}' => r"\f".into(),
        '\n' => r"\n".into(),
        '\r' => r"\r".into(),
        '\t' => r"\t".into(),
        '\u{b}' => r"\v".into(),
        '\\' => r"\\".into(),
        '"' => "\\\"".into(),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => format!(r"\x{:02x}", c as u32),
        // Go's IsPrint: U+0080–U+009F and the soft hyphen are not.
        c if (0x80..0xa0).contains(&(c as u32)) || c as u32 == 0xad => format!(r"\u{:04x}", c as u32),
        c => c.to_string(),
    }
}

impl Scanner {
    fn new() -> Scanner {
        Scanner {
            step: State::BeginValue,
            parse: Vec::new(),
            end_top: false,
            error: None,
        }
    }

    fn error(&mut self, c: u8, context: &str) -> Op {
        self.step = State::Error;
        self.error = Some(format!("invalid character {} {context}", quote_char(c)));
        Op::Error
    }

    fn push(&mut self, c: u8, parse: Parse, op: Op) -> Op {
        self.parse.push(parse);
        if self.parse.len() <= NESTING_MAX {
            op
        } else {
            self.error(c, "exceeded max depth")
        }
    }

    fn pop(&mut self) {
        self.parse.pop();
        if self.parse.is_empty() {
            self.step = State::EndTop;
            self.end_top = true;
        } else {
            self.step = State::EndValue;
        }
    }

    /// Go's `eof`: whether the text ended at a whole value.
    fn eof(&mut self) -> Op {
        if self.error.is_some() {
            return Op::Error;
        }
        if self.end_top {
            return Op::End;
        }
        self.step(b' ');
        if self.end_top {
            return Op::End;
        }
        if self.error.is_none() {
            self.error = Some("unexpected end of JSON input".to_string());
        }
        Op::Error
    }

    fn step(&mut self, c: u8) -> Op {
        match self.step {
            State::BeginValueOrEmpty => {
                if is_space(c) {
                    Op::SkipSpace
                } else if c == b']' {
                    self.end_value(c)
                } else {
                    self.begin_value(c)
                }
            }
            State::BeginValue => self.begin_value(c),
            State::BeginStringOrEmpty => {
                if is_space(c) {
                    Op::SkipSpace
                } else if c == b'}' {
                    *self.parse.last_mut().expect("inside an object") = Parse::ObjectValue;
                    self.end_value(c)
                } else {
                    self.begin_string(c)
                }
            }
            State::BeginString => self.begin_string(c),
            State::EndValue => self.end_value(c),
            State::EndTop => {
                if !is_space(c) {
                    self.error(c, "after top-level value");
                }
                Op::End
            }
            State::InString | State::InStringEsc | State::InStringEscU(_) => self.in_string(c),
            State::Literal(rest, word) => self.in_literal(c, rest, word),
            State::Error => Op::Error,
            _ => self.in_number(c),
        }
    }

    /// A byte inside a string, its escapes included.
    fn in_string(&mut self, c: u8) -> Op {
        match self.step {
            State::InString => match c {
                b'"' => {
                    self.step = State::EndValue;
                    Op::Continue
                }
                b'\\' => {
                    self.step = State::InStringEsc;
                    Op::Continue
                }
                c if c < 0x20 => self.error(c, "in string literal"),
                _ => Op::Continue,
            },
            State::InStringEsc => match c {
                b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {
                    self.step = State::InString;
                    Op::Continue
                }
                b'u' => {
                    self.step = State::InStringEscU(0);
                    Op::Continue
                }
                _ => self.error(c, "in string escape code"),
            },
            State::InStringEscU(seen) if c.is_ascii_hexdigit() => {
                self.step = if seen == 3 {
                    State::InString
                } else {
                    State::InStringEscU(seen + 1)
                };
                Op::Continue
            }
            _ => self.error(c, "in \\u hexadecimal character escape"),
        }
    }

    /// A byte inside a number.
    fn in_number(&mut self, c: u8) -> Op {
        let (next, error) = match (self.step, c) {
            (State::Neg, b'0') => (State::Zero, ""),
            (State::Neg, b'1'..=b'9') => (State::One, ""),
            (State::Neg, _) => (State::Error, "in numeric literal"),
            (State::One, b'0'..=b'9') => (State::One, ""),
            (State::One | State::Zero, b'.') => (State::Dot, ""),
            (State::One | State::Zero | State::Dot0, b'e' | b'E') => (State::E, ""),
            (State::Dot, b'0'..=b'9') => (State::Dot0, ""),
            (State::Dot, _) => (State::Error, "after decimal point in numeric literal"),
            (State::Dot0, b'0'..=b'9') => (State::Dot0, ""),
            (State::E, b'+' | b'-') => (State::ESign, ""),
            (State::E | State::ESign | State::E0, b'0'..=b'9') => (State::E0, ""),
            (State::E | State::ESign, _) => (State::Error, "in exponent of numeric literal"),
            // The number ended before this byte.
            _ => return self.end_value(c),
        };
        if next == State::Error {
            return self.error(c, error);
        }
        self.step = next;
        Op::Continue
    }

    /// A byte inside `true`, `false` or `null`, of which `rest` is left.
    fn in_literal(&mut self, c: u8, rest: &'static [u8], word: &'static str) -> Op {
        if c == rest[0] {
            self.step = if rest.len() == 1 {
                State::EndValue
            } else {
                State::Literal(&rest[1..], word)
            };
            Op::Continue
        } else {
            let context = format!("in literal {word} (expecting '{}')", char::from(rest[0]));
            self.error(c, &context)
        }
    }

    fn begin_value(&mut self, c: u8) -> Op {
        if is_space(c) {
            return Op::SkipSpace;
        }
        let (step, op) = match c {
            b'{' => {
                self.step = State::BeginStringOrEmpty;
                return self.push(c, Parse::ObjectKey, Op::BeginObject);
            }
            b'[' => {
                self.step = State::BeginValueOrEmpty;
                return self.push(c, Parse::ArrayValue, Op::BeginArray);
            }
            b'"' => (State::InString, Op::BeginLiteral),
            b'-' => (State::Neg, Op::BeginLiteral),
            b'0' => (State::Zero, Op::BeginLiteral),
            b't' => (State::Literal(b"rue", "true"), Op::BeginLiteral),
            b'f' => (State::Literal(b"alse", "false"), Op::BeginLiteral),
            b'n' => (State::Literal(b"ull", "null"), Op::BeginLiteral),
            b'1'..=b'9' => (State::One, Op::BeginLiteral),
            _ => return self.error(c, "looking for beginning of value"),
        };
        self.step = step;
        op
    }

    fn begin_string(&mut self, c: u8) -> Op {
        if is_space(c) {
            return Op::SkipSpace;
        }
        if c == b'"' {
            self.step = State::InString;
            return Op::BeginLiteral;
        }
        self.error(c, "looking for beginning of object key string")
    }

    fn end_value(&mut self, c: u8) -> Op {
        let Some(&parse) = self.parse.last() else {
            self.step = State::EndTop;
            self.end_top = true;
            return self.step(c);
        };
        if is_space(c) {
            self.step = State::EndValue;
            return Op::SkipSpace;
        }
        match parse {
            Parse::ObjectKey if c == b':' => {
                *self.parse.last_mut().expect("inside an object") = Parse::ObjectValue;
                self.step = State::BeginValue;
                Op::ObjectKey
            }
            Parse::ObjectKey => self.error(c, "after object key"),
            Parse::ObjectValue if c == b',' => {
                *self.parse.last_mut().expect("inside an object") = Parse::ObjectKey;
                self.step = State::BeginString;
                Op::ObjectValue
            }
            Parse::ObjectValue if c == b'}' => {
                self.pop();
                Op::EndObject
            }
            Parse::ObjectValue => self.error(c, "after object key:value pair"),
            Parse::ArrayValue if c == b',' => {
                self.step = State::BeginValue;
                Op::ArrayValue
            }
            Parse::ArrayValue if c == b']' => {
                self.pop();
                Op::EndArray
            }
            Parse::ArrayValue => self.error(c, "after array element"),
        }
    }
}

/// `json.Unmarshal`'s first step: `data` must be exactly one value,
/// with space around it at most. The error is Go's text.
pub fn check_valid(data: &[u8]) -> Result<(), String> {
    let mut scanner = Scanner::new();
    for &c in data {
        if scanner.step(c) == Op::Error {
            return Err(scanner.error.take().expect("an error was recorded"));
        }
    }
    if scanner.eof() == Op::Error {
        return Err(scanner.error.take().expect("an error was recorded"));
    }
    Ok(())
}

/// What [`next_value`] found at the front of a body.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A whole value at `start..end`; the body's first `end` bytes are
    /// consumed (the next value begins after them).
    Value { start: usize, end: usize },
    /// Only space, and the body has ended (Go's `io.EOF`).
    End,
    /// The value is not whole yet: more bytes are needed.
    More,
}

/// The next value of a body whose unconsumed bytes are `buffer`, as Go's
/// `json.Decoder.Decode` reads it; `ended` says no byte follows. Errors
/// are Go's texts: a syntax error, or "unexpected EOF" for a body that
/// ends inside a value.
pub fn next_value(buffer: &[u8], ended: bool) -> Result<Next, String> {
    let mut scanner = Scanner::new();
    let mut start = None;
    for (at, &c) in buffer.iter().enumerate() {
        let op = scanner.step(c);
        if start.is_none() && op != Op::SkipSpace && op != Op::Error {
            start = Some(at);
        }
        match op {
            // The byte after a number (or literal) ended it; it is not
            // part of the value.
            Op::End => {
                return Ok(Next::Value {
                    start: start.unwrap_or(at),
                    end: at,
                });
            }
            // Go's decoder ends an object or array at its closing byte
            // rather than waiting for one more.
            Op::EndObject | Op::EndArray if scanner.parse.is_empty() => {
                return Ok(Next::Value {
                    start: start.unwrap_or(at),
                    end: at + 1,
                });
            }
            Op::Error => return Err(scanner.error.take().expect("an error was recorded")),
            _ => {}
        }
    }
    if !ended {
        return Ok(Next::More);
    }
    if scanner.step(b' ') == Op::End {
        return Ok(Next::Value {
            start: start.unwrap_or(0),
            end: buffer.len(),
        });
    }
    if buffer.iter().any(|&c| !is_space(c)) {
        Err("unexpected EOF".to_string())
    } else {
        Ok(Next::End)
    }
}

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

struct Parser<'a> {
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
fn hex4(s: &[u8]) -> Option<u32> {
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
fn decode_rune(s: &[u8]) -> (char, usize) {
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

/// Go's message for a value of kind `kind` that cannot go into a Go
/// value of type `go_type`.
pub fn type_error(kind: &str, go_type: &str) -> String {
    format!("json: cannot unmarshal {kind} into Go value of type {go_type}")
}

/// `json.Unmarshal(text, &n)` for a Go integer of type `go_type`
/// (`int64`, `int32`, `uint64`, `uint32`, `protoreflect.EnumNumber`)
/// whose range is `min..=max`; null leaves it 0.
fn to_integer(text: &[u8], go_type: &str, min: i128, max: i128) -> Result<i128, String> {
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
const BASE64_VALUES: [u8; 256] = {
    let mut table = [0xffu8; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};

fn corrupt(at: usize) -> String {
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
fn html_safe(b: u8) -> bool {
    (0x20..0x80).contains(&b) && !matches!(b, b'"' | b'\\' | b'<' | b'>' | b'&')
}

const HEX: &[u8; 16] = b"0123456789abcdef";

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
