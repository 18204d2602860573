//! The probes that say whether a member serves: GET `/health` (healthy:
//! `"health":"true"`) and `/livez` (live: status 200), over plain HTTP
//! on loopback, or over TLS through `curl` with the cluster's client
//! certificate. A caller with a TLS client of its own gives its probe.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// How long a probe waits to connect: loopback answers at once or not at all.
pub const CONNECT_WITHIN: Duration = Duration::from_millis(200);
/// How long a probe waits for the answer: a member starting up may take
/// a moment to answer its first request.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// A caller's own GET: (port, path) to the raw response, or "".
pub type Get = Arc<dyn Fn(u16, &str) -> String + Send + Sync>;

/// How to GET a path from a member's client port.
#[derive(Clone)]
pub enum Probe {
    /// Plain HTTP.
    Plain,
    /// HTTPS through `curl`, with this CA and client pair.
    Curl { ca: PathBuf, cert: PathBuf, key: PathBuf },
    /// The caller's own: GET (port, path), the raw response or "".
    Custom(Get),
}

impl Probe {
    /// The response to GET `path` on 127.0.0.1:`port` (its body at
    /// least), or an empty string when nothing answers.
    pub fn get(&self, port: u16, path: &str) -> String {
        match self {
            Probe::Plain => http_get(port, path),
            Probe::Curl { ca, cert, key } => {
                let output = Command::new("curl")
                    .args(["-s", "-i", "--max-time", "3", "--cacert"])
                    .arg(ca)
                    .arg("--cert")
                    .arg(cert)
                    .arg("--key")
                    .arg(key)
                    .arg(format!("https://127.0.0.1:{port}{path}"))
                    .output();
                output
                    .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
                    .unwrap_or_default()
            }
            Probe::Custom(get) => get(port, path),
        }
    }

    /// Whether the member on `port` says it is healthy.
    pub fn healthy(&self, port: u16) -> bool {
        self.get(port, "/health").contains("\"health\":\"true\"")
    }

    /// Whether the member on `port` answers `/livez` with 200 (liveness
    /// ignores alarms, unlike health).
    pub fn live(&self, port: u16) -> bool {
        self.get(port, "/livez").split_whitespace().nth(1) == Some("200")
    }
}

/// GET `path` over HTTP/1.0 (so no server chunks the body): the raw
/// response, or an empty string when nothing answers.
pub fn http_get(port: u16, path: &str) -> String {
    let Ok(mut stream) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), CONNECT_WITHIN) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(ANSWER_WITHIN));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}
