//! Go's JSON scanner, state for state (`encoding/json/scanner.go`): the
//! validity check of a whole text and the next value of a stream body.

use super::*;

/// What one byte did to the scan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Op {
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
pub(super) enum State {
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
pub(super) enum Parse {
    ObjectKey,
    ObjectValue,
    ArrayValue,
}

/// Go's scanner, one byte at a time.
pub(super) struct Scanner {
    step: State,
    parse: Vec<Parse>,
    end_top: bool,
    error: Option<String>,
}

pub(super) fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's `quoteChar`: a byte as the scanner's messages show it.
pub(super) fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_string(),
        b'"' => "'\"'".to_string(),
        _ => format!("'{}'", go_quote_rune(char::from(c))),
    }
}

/// The inside of Go's `strconv.Quote` of one rune (U+0000 to U+00FF).
pub(super) fn go_quote_rune(c: char) -> String {
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
