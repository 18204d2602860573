//! The raft stream's wire format: raft messages between members as
//! length-prefixed frames on one TCP connection (TLS through rustls on
//! `https://` peer URLs), without HTTP/2 or gRPC around them.
//!
//! The peer port serves both this stream and the peer gRPC service
//! (snapshots, forwarded calls). The listener tells them apart by the
//! first bytes of a plain connection ([`RAFT_MAGIC`] against HTTP/2's
//! preface) or by the ALPN protocol of a TLS one ([`RAFT_ALPN`]).
//!
//! ```text
//! hello:   "KVRAFT01" | from: u64 LE            (dialler to listener, once)
//! frame:   length: u32 LE | raft Message (protobuf, `length` bytes)
//!          length 0: a heartbeat, no message: a sender's keep-alive
//!          of a quiet stream (a message to a peer names it in `to`, so
//!          none encodes to 0 bytes; a receiver of an earlier release
//!          decodes it as an empty message, a local one, which raft
//!          refuses)
//! answer:  one byte, REMOVED (listener to dialler): the dialler was
//!          removed from the cluster; the listener then closes
//! ```
//!
//! A frame longer than [`PEER_MESSAGE_BYTES_MAX`] ends the connection:
//! the sender never writes one (raft caps an append's entries near 1 MiB,
//! one entry at `--max-request-bytes`).

use std::io;
use std::io::Read;

use protobuf::Message as _;
use raft::prelude::Message;

pub use crate::tls::RAFT_ALPN;

/// Largest raft message a member accepts from a peer: raft caps an
/// append near 1 MiB of entries, but one entry may be up to
/// `--max-request-bytes`; 64 MiB covers any setting of it etcd's docs
/// recommend (up to 10 MiB) with room to spare.
pub const PEER_MESSAGE_BYTES_MAX: usize = 64 << 20;

/// What a dialler sends first on a plain connection: not a prefix of
/// HTTP/2's client preface ("PRI * HTTP/2.0…"), so the listener can tell.
pub const RAFT_MAGIC: [u8; 8] = *b"KVRAFT01";

/// Bytes of the hello: the magic and the dialler's member id.
pub const HELLO_BYTES: usize = 16;

/// Why a peer refuses this member's messages: etcd's words for a member
/// that was removed. The sender stops the member on hearing it.
pub const REMOVED_MESSAGE: &str = "the member has been permanently removed from the cluster";

/// A frame with no message: the link heartbeat (`peer::link`).
pub const HEARTBEAT: [u8; 4] = [0; 4];

/// The listener's one answer: the dialler has been removed.
pub const REMOVED: u8 = b'R';

/// Bytes read from the socket at a time by a receiver: a batch of
/// appends at full load is some tens of KiB; larger frames grow the
/// buffer to their size.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// The hello a dialler with id `from` sends.
pub fn hello(from: u64) -> [u8; HELLO_BYTES] {
    let mut hello = [0u8; HELLO_BYTES];
    hello[..8].copy_from_slice(&RAFT_MAGIC);
    hello[8..].copy_from_slice(&from.to_le_bytes());
    hello
}

/// The dialler's id from a hello, if it is one.
pub fn parse_hello(hello: &[u8; HELLO_BYTES]) -> Option<u64> {
    (hello[..8] == RAFT_MAGIC).then(|| u64::from_le_bytes(hello[8..].try_into().expect("8 bytes")))
}

/// Appends `message` to `out` as one frame.
pub fn encode(message: &Message, out: &mut Vec<u8>) {
    let length = message.compute_size();
    out.extend_from_slice(&length.to_le_bytes());
    message.write_to_vec(out).expect("raft messages encode into a vector");
}

/// Reads frames from a stream into messages, a read at a time. Its
/// buffer is zeroed once and reused: each read only moves the tail of a
/// partial frame to the front.
pub struct FrameReader {
    buffer: Vec<u8>,
    /// Where the unparsed bytes start and end in `buffer`.
    start: usize,
    end: usize,
}

impl Default for FrameReader {
    fn default() -> Self {
        FrameReader {
            buffer: vec![0; READ_CHUNK_BYTES],
            start: 0,
            end: 0,
        }
    }
}

impl FrameReader {
    /// Reads once from `stream` (blocking as it blocks; a non-blocking
    /// socket's `WouldBlock` is returned as the error it is) and parses
    /// every whole frame now buffered, in order. `Ok(None)` when the
    /// stream ended; bytes read are added to `received`. The raft loop
    /// reads plain streams with this; TLS ones are read with
    /// [`FrameReader::read_async`].
    pub fn read(&mut self, stream: &mut impl Read, received: &mut u64) -> io::Result<Option<Vec<Message>>> {
        let read = stream.read(self.space())?;
        self.filled(read, received)
    }

    /// The same, from an async stream.
    pub async fn read_async(
        &mut self,
        stream: &mut (impl tokio::io::AsyncRead + Unpin),
        received: &mut u64,
    ) -> io::Result<Option<Vec<Message>>> {
        use tokio::io::AsyncReadExt as _;
        let read = stream.read(self.space()).await?;
        self.filled(read, received)
    }

    /// Room for the next read: the unparsed tail moved to the front, and
    /// at least a chunk, or the rest of a frame whose length is known.
    fn space(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let room = READ_CHUNK_BYTES.max(self.wanted().saturating_sub(self.end));
        if self.buffer.len() < self.end + room {
            self.buffer.resize(self.end + room, 0);
        }
        &mut self.buffer[self.end..]
    }

    /// Takes `read` bytes just read into [`FrameReader::space`].
    fn filled(&mut self, read: usize, received: &mut u64) -> io::Result<Option<Vec<Message>>> {
        if read == 0 {
            return Ok(None);
        }
        self.end += read;
        *received += read as u64;
        self.parse().map(Some)
    }

    /// Bytes the frame at `start` needs in all, if its length is known.
    /// An oversized frame is refused by `parse`, not allocated for.
    fn wanted(&self) -> usize {
        match frame_length(&self.buffer[self.start..self.end]) {
            Some(length) if length <= PEER_MESSAGE_BYTES_MAX => 4 + length,
            _ => 0,
        }
    }

    fn parse(&mut self) -> io::Result<Vec<Message>> {
        let mut messages = Vec::new();
        loop {
            let rest = &self.buffer[self.start..self.end];
            let Some(length) = frame_length(rest) else {
                return Ok(messages);
            };
            if length > PEER_MESSAGE_BYTES_MAX {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "raft frame too large"));
            }
            if rest.len() < 4 + length {
                return Ok(messages);
            }
            if length == 0 {
                self.start += HEARTBEAT.len();
                continue;
            }
            let message = Message::parse_from_bytes(&rest[4..4 + length])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad raft message: {e}")))?;
            messages.push(message);
            self.start += 4 + length;
        }
    }
}

/// The length a frame starting at `bytes` declares, once its prefix is in.
fn frame_length(bytes: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = bytes.get(..4)?.try_into().expect("4 bytes");
    Some(u32::from_le_bytes(prefix) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::prelude::{Entry, MessageType};

    fn append(index: u64, bytes: usize) -> Message {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgAppend);
        message.index = index;
        message.set_entries(
            vec![Entry {
                data: vec![7u8; bytes].into(),
                ..Entry::default()
            }]
            .into(),
        );
        message
    }

    /// A reader that hands out at most `step` bytes per read.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(out.len()).min(self.bytes.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    // Goal: frames split anywhere across reads, and frames larger than a
    // read chunk, come out whole and in order, heartbeat frames add no
    // message, and the end is reported.
    #[test]
    fn frames_survive_any_split() {
        let sent: Vec<Message> = (1..=20).map(|i| append(i, (i as usize * 7919) % 200_000)).collect();
        let mut wire = Vec::new();
        for message in &sent {
            encode(message, &mut wire);
            // Heartbeats between messages carry none.
            wire.extend_from_slice(&HEARTBEAT);
        }
        for step in [1, 3, 4096, 1 << 20] {
            let mut stream = Trickle { bytes: &wire, step };
            let mut reader = FrameReader::default();
            let (mut got, mut received) = (Vec::new(), 0);
            while let Some(messages) = reader.read(&mut stream, &mut received).unwrap() {
                got.extend(messages);
            }
            assert_eq!(got, sent, "split every {step} bytes");
            assert_eq!(received, wire.len() as u64);
        }
    }

    // Goal: a frame claiming more than the bound ends the stream with an
    // error instead of an allocation of its size.
    #[test]
    fn an_oversized_frame_is_refused() {
        let wire = ((PEER_MESSAGE_BYTES_MAX + 1) as u32).to_le_bytes();
        let mut reader = FrameReader::default();
        let error = reader.read(&mut &wire[..], &mut 0).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }

    // Goal: a receiver of an earlier release, which decodes a heartbeat
    // as a message, gets one raft refuses as local, so it changes nothing.
    #[test]
    fn a_heartbeat_read_as_a_message_is_a_local_one() {
        let message = Message::parse_from_bytes(&[]).unwrap();
        assert!(raft::raw_node::is_local_msg(message.get_msg_type()));
    }

    #[test]
    fn the_hello_names_the_dialler_and_is_not_http2() {
        assert_eq!(parse_hello(&hello(0xabc)), Some(0xabc));
        assert!(!b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".starts_with(&RAFT_MAGIC));
        let mut other = hello(1);
        other[0] = b'P';
        assert_eq!(parse_hello(&other), None);
    }
}
