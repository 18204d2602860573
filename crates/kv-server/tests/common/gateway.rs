//! A client of etcd's gRPC-JSON gateway for the tests, on a plain socket:
//! one request and its whole answer ([`post`]), or a stream's answers
//! read chunk by chunk as they come ([`Stream`]), as etcd3gw reads them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One answer: status code, headers (names lowercased) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }
}

fn connect(port: u16, read_timeout: Duration) -> TcpStream {
    let stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).expect("connect");
    stream.set_read_timeout(Some(read_timeout)).expect("timeout");
    stream
}

fn send(stream: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    stream.write_all(body).expect("write body");
}

/// Reads a status line and headers.
fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status = line.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header line");
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            return (status, headers);
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
}

/// The next chunk of a chunked body; None at its end.
fn read_chunk(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut chunk = vec![0; size + 2];
    reader.read_exact(&mut chunk).ok()?;
    chunk.truncate(size);
    (size > 0).then_some(chunk)
}

/// `method` `path` with `body` and `headers`: the whole answer.
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut stream = connect(port, Duration::from_secs(15));
    let mut all = vec![("Connection", "close")];
    all.extend_from_slice(headers);
    send(&mut stream, method, path, &all, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let chunked = headers
        .iter()
        .any(|(name, value)| name == "transfer-encoding" && value == "chunked");
    let mut body = Vec::new();
    if chunked {
        while let Some(chunk) = read_chunk(&mut reader) {
            body.extend_from_slice(&chunk);
        }
    } else {
        let _ = reader.read_to_end(&mut body);
    }
    Answer { status, headers, body }
}

/// POST `path` with a JSON `body`.
pub fn post(port: u16, path: &str, body: &str) -> Answer {
    request(
        port,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )
}

/// A stream's answer, read as it comes.
pub struct Stream {
    pub status: u16,
    reader: BufReader<TcpStream>,
    pending: Vec<u8>,
}

impl Stream {
    /// Opens a stream at `path` with `body` (its requests); returns once
    /// its headers are in.
    pub fn open(port: u16, path: &str, body: &str, read_timeout: Duration) -> Stream {
        let mut stream = connect(port, read_timeout);
        send(
            &mut stream,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        let mut reader = BufReader::new(stream);
        let (status, _) = read_head(&mut reader);
        Stream {
            status,
            reader,
            pending: Vec::new(),
        }
    }

    /// The next newline-ended JSON object of the stream; None once it
    /// ended or nothing came within the read timeout.
    pub fn next(&mut self) -> Option<serde_json::Value> {
        loop {
            if let Some(at) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=at).collect();
                return Some(serde_json::from_slice(&line).expect("a JSON line"));
            }
            let chunk = read_chunk(&mut self.reader)?;
            self.pending.extend_from_slice(&chunk);
        }
    }
}
