//! etcd's `--grpc-keepalive-min-time`: clients' HTTP/2 pings policed as
//! etcd's gRPC server polices them (its keepalive enforcement policy,
//! with pings on an idle connection not permitted). The HTTP/2 server
//! answers every ping however often it comes, so this sits between it
//! and the connection and reads the frames' headers going both ways.
//!
//! The rule, grpc-go's:
//! - a ping that comes sooner than the minimum time after the last one,
//!   while the connection has a stream open, is a strike; with none open,
//!   one sooner than two hours is;
//! - the server sending headers or data clears the strikes, and the next
//!   ping is then not judged;
//! - the third strike past two ends the connection with GOAWAY
//!   `ENHANCE_YOUR_CALM` and the debug data `too_many_pings`, which a Go
//!   client reads as its cue to ping half as often.
//!
//! A connection that does not open with HTTP/2's preface (HTTP/1) is
//! passed through untouched.

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client's first bytes on an HTTP/2 connection.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Strikes a client may have; one more ends the connection (grpc-go's
/// `maxPingStrikes`).
const PING_STRIKES_MAX: u32 = 2;

/// How far apart pings must be on a connection with no stream open
/// (grpc-go's `defaultPingTimeout`, as etcd does not permit pings
/// without streams).
const IDLE_PING_INTERVAL_MIN: Duration = Duration::from_secs(2 * 60 * 60);

/// Streams tracked on one connection: beyond what any client opens at
/// once (etcd advertises no stream bound by default, and Go clients open
/// at most 100 by gRPC's default), so an abusive client cannot make the
/// set grow without bound; a stream past it counts as open until the
/// connection ends.
const TRACKED_STREAMS_MAX: usize = 1 << 16;

const FRAME_DATA: u8 = 0x0;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_RST_STREAM: u8 = 0x3;
const FRAME_PING: u8 = 0x6;
const FRAME_GOAWAY: u8 = 0x7;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_ACK: u8 = 0x1;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame's header, as HTTP/2 lays it out.
#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    kind: u8,
    flags: u8,
    stream: u32,
}

/// Follows one direction's bytes frame by frame, keeping only the
/// header of the frame under way.
#[derive(Default)]
struct FrameCursor {
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    skip: usize,
}

impl FrameCursor {
    /// Takes `bytes`, calling `seen` for each frame header completed.
    fn feed(&mut self, mut bytes: &[u8], mut seen: impl FnMut(FrameHeader)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let passed = self.skip.min(bytes.len());
                self.skip -= passed;
                bytes = &bytes[passed..];
                continue;
            }
            let taken = (9 - self.have).min(bytes.len());
            self.header[self.have..self.have + taken].copy_from_slice(&bytes[..taken]);
            self.have += taken;
            bytes = &bytes[taken..];
            if self.have == 9 {
                let h = self.header;
                self.have = 0;
                self.skip = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                seen(FrameHeader {
                    kind: h[3],
                    flags: h[4],
                    stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                });
            }
        }
    }

    /// Whether the bytes so far end on a frame's end.
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.skip == 0
    }
}

/// The policy's state for one HTTP/2 connection.
struct Policy {
    /// Preface bytes seen; the connection is HTTP/1 if they differ.
    preface_seen: usize,
    inbound: FrameCursor,
    outbound: FrameCursor,
    judge: Judge,
}

/// What the ping rule needs to know of the connection.
struct Judge {
    min_time: Duration,
    open_streams: HashSet<u32>,
    last_stream: u32,
    last_ping: Option<Instant>,
    strikes: u32,
    /// The server sent headers or data since the last ping.
    reset_strikes: bool,
}

impl Policy {
    fn new(min_time: Duration) -> Policy {
        Policy {
            preface_seen: 0,
            inbound: FrameCursor::default(),
            outbound: FrameCursor::default(),
            judge: Judge {
                min_time,
                open_streams: HashSet::new(),
                last_stream: 0,
                last_ping: None,
                strikes: 0,
                reset_strikes: false,
            },
        }
    }

    /// Reads the client's bytes; Some(false) once they are not HTTP/2,
    /// Some(true) when the client struck out.
    fn client_sent(&mut self, mut bytes: &[u8]) -> Option<bool> {
        if self.preface_seen < PREFACE.len() {
            let taken = (PREFACE.len() - self.preface_seen).min(bytes.len());
            if bytes[..taken] != PREFACE[self.preface_seen..self.preface_seen + taken] {
                return Some(false);
            }
            self.preface_seen += taken;
            bytes = &bytes[taken..];
        }
        let mut struck_out = false;
        let judge = &mut self.judge;
        self.inbound
            .feed(bytes, |header| struck_out |= judge.client_frame(header));
        struck_out.then_some(true)
    }

    /// Reads the server's bytes.
    fn server_sent(&mut self, bytes: &[u8]) {
        let judge = &mut self.judge;
        self.outbound.feed(bytes, |header| judge.server_frame(header));
    }
}

impl Judge {
    /// A frame from the client; whether it struck out.
    fn client_frame(&mut self, header: FrameHeader) -> bool {
        match header.kind {
            FRAME_HEADERS if header.stream > self.last_stream => {
                self.last_stream = header.stream;
                if self.open_streams.len() < TRACKED_STREAMS_MAX {
                    self.open_streams.insert(header.stream);
                }
                false
            }
            FRAME_RST_STREAM => {
                self.open_streams.remove(&header.stream);
                false
            }
            FRAME_PING if header.flags & FLAG_ACK == 0 => self.ping(Instant::now()),
            _ => false,
        }
    }

    /// A frame from the server.
    fn server_frame(&mut self, header: FrameHeader) {
        match header.kind {
            FRAME_HEADERS | FRAME_DATA => {
                self.reset_strikes = true;
                if header.flags & FLAG_END_STREAM != 0 {
                    self.open_streams.remove(&header.stream);
                }
            }
            FRAME_RST_STREAM => {
                self.open_streams.remove(&header.stream);
            }
            _ => {}
        }
    }

    /// One ping from the client, judged; whether the client struck out.
    fn ping(&mut self, now: Instant) -> bool {
        let last = self.last_ping.replace(now);
        if std::mem::take(&mut self.reset_strikes) {
            self.strikes = 0;
            return false;
        }
        let least = if self.open_streams.is_empty() {
            IDLE_PING_INTERVAL_MIN
        } else {
            self.min_time
        };
        if last.is_some_and(|last| now.duration_since(last) < least) {
            self.strikes += 1;
        }
        self.strikes > PING_STRIKES_MAX
    }

    /// The GOAWAY that ends a connection whose client struck out.
    fn goaway(&self) -> Vec<u8> {
        let debug = b"too_many_pings";
        let length = 8 + debug.len();
        let mut frame = vec![
            (length >> 16) as u8,
            (length >> 8) as u8,
            length as u8,
            FRAME_GOAWAY,
            0,
            0,
            0,
            0,
            0,
        ];
        frame.extend_from_slice(&self.last_stream.to_be_bytes());
        frame.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
        frame.extend_from_slice(debug);
        frame
    }
}

/// Where a policed connection is.
enum State {
    /// Frames are followed and pings judged.
    Policing(Box<Policy>),
    /// Not HTTP/2, or policing is off: bytes pass untouched.
    PassThrough,
    /// The client struck out: the GOAWAY is being written.
    Ending { goaway: Vec<u8>, written: usize },
    /// The GOAWAY is out (or could not be placed): the connection reads
    /// as ended.
    Ended,
}

/// A client connection with its pings policed.
pub struct PingPoliced<S> {
    inner: S,
    state: State,
}

impl<S> PingPoliced<S> {
    /// `inner`, policed with `min_time` between pings while streams are
    /// open.
    pub fn new(inner: S, min_time: Duration) -> PingPoliced<S> {
        PingPoliced {
            inner,
            state: State::Policing(Box::new(Policy::new(min_time))),
        }
    }
}

fn ended() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "got too many pings from the client")
}

impl<S: AsyncWrite + Unpin> PingPoliced<S> {
    /// Writes what is left of the GOAWAY; ready once it is all out.
    fn poll_goaway(&mut self, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let State::Ending { goaway, written } = &mut self.state {
            if *written == goaway.len() {
                let flushed = Pin::new(&mut self.inner).poll_flush(context);
                if flushed.is_pending() {
                    return Poll::Pending;
                }
                tracing::debug!("a client struck out pinging: GOAWAY too_many_pings");
                self.state = State::Ended;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(context, &goaway[*written..]) {
                Poll::Ready(Ok(0)) => self.state = State::Ended,
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(_)) => self.state = State::Ended,
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PingPoliced<S> {
    fn poll_read(self: Pin<&mut Self>, context: &mut Context<'_>, buffer: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.state, State::Ending { .. }) {
            return this.poll_goaway(context);
        }
        if matches!(this.state, State::Ended) {
            return Poll::Ready(Ok(()));
        }
        let before = buffer.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(context, buffer);
        let State::Policing(policy) = &mut this.state else {
            return polled;
        };
        if !matches!(polled, Poll::Ready(Ok(()))) {
            return polled;
        }
        match policy.client_sent(&buffer.filled()[before..]) {
            None => polled,
            Some(false) => {
                this.state = State::PassThrough;
                polled
            }
            Some(true) => {
                // What was read is dropped: the connection ends here.
                buffer.set_filled(before);
                this.state = if policy.outbound.at_boundary() {
                    State::Ending {
                        goaway: policy.judge.goaway(),
                        written: 0,
                    }
                } else {
                    State::Ended
                };
                this.poll_goaway(context)
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PingPoliced<S> {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match &mut this.state {
            State::Ending { .. } => {
                if this.poll_goaway(context).is_pending() {
                    return Poll::Pending;
                }
                Poll::Ready(Err(ended()))
            }
            State::Ended => Poll::Ready(Err(ended())),
            State::PassThrough => Pin::new(&mut this.inner).poll_write(context, bytes),
            State::Policing(policy) => {
                let polled = Pin::new(&mut this.inner).poll_write(context, bytes);
                if let Poll::Ready(Ok(n)) = polled {
                    policy.server_sent(&bytes[..n]);
                }
                polled
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match &mut this.state {
            State::PassThrough => Pin::new(&mut this.inner).poll_write_vectored(context, buffers),
            State::Policing(policy) => {
                let polled = Pin::new(&mut this.inner).poll_write_vectored(context, buffers);
                if let Poll::Ready(Ok(mut n)) = polled {
                    for buffer in buffers {
                        let taken = n.min(buffer.len());
                        policy.server_sent(&buffer[..taken]);
                        n -= taken;
                        if n == 0 {
                            break;
                        }
                    }
                }
                polled
            }
            State::Ending { .. } | State::Ended => {
                let first = buffers.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
                Pin::new(this).poll_write(context, first)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: usize) -> Vec<u8> {
        let mut bytes = vec![(payload >> 16) as u8, (payload >> 8) as u8, payload as u8, kind, flags];
        bytes.extend_from_slice(&stream.to_be_bytes());
        bytes.extend(std::iter::repeat_n(0u8, payload));
        bytes
    }

    fn ping() -> Vec<u8> {
        frame(FRAME_PING, 0, 0, 8)
    }

    // Goal: grpc-go's counting, split anywhere: with a stream open, pings
    // closer than the minimum strike, the third strike past two ends it,
    // server data clears the strikes; without streams, two hours apply.
    #[test]
    fn pings_are_judged_as_grpc_go_judges_them() {
        let mut policy = Policy::new(Duration::from_secs(5));
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(FRAME_HEADERS, 0, 1, 40));
        // One byte at a time: the cursor keeps its place.
        for byte in &wire {
            assert_eq!(policy.client_sent(std::slice::from_ref(byte)), None);
        }
        assert!(policy.judge.open_streams.contains(&1));
        let now = Instant::now();
        assert!(!policy.judge.ping(now), "the first ping is not judged");
        assert!(!policy.judge.ping(now), "strike one");
        assert!(!policy.judge.ping(now), "strike two");
        policy.server_sent(&frame(FRAME_DATA, 0, 1, 10));
        assert!(!policy.judge.ping(now), "cleared by the server's data");
        assert_eq!(policy.judge.strikes, 0);
        let later = now + Duration::from_secs(6);
        assert!(!policy.judge.ping(later), "far enough apart");
        assert_eq!(policy.judge.strikes, 0);
        assert!(!policy.judge.ping(later));
        assert!(!policy.judge.ping(later));
        assert!(policy.judge.ping(later), "the third strike ends it");
        // The stream ends: now pings must be hours apart.
        let mut idle = Policy::new(Duration::from_secs(5));
        assert_eq!(idle.client_sent(PREFACE), None);
        let mut at = Instant::now();
        for n in 0..3 {
            at += Duration::from_secs(60);
            assert!(!idle.judge.ping(at), "ping {n}");
        }
        assert!(
            idle.judge.ping(at + Duration::from_secs(60)),
            "a minute apart is too often when idle"
        );
    }

    #[test]
    fn the_server_ending_a_stream_closes_it_and_http1_passes() {
        let mut policy = Policy::new(Duration::from_secs(5));
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(FRAME_HEADERS, 0, 3, 0));
        wire.extend(ping());
        assert_eq!(policy.client_sent(&wire), None);
        assert!(policy.judge.open_streams.contains(&3));
        policy.server_sent(&frame(FRAME_HEADERS, FLAG_END_STREAM, 3, 12));
        assert!(policy.judge.open_streams.is_empty());
        let goaway = policy.judge.goaway();
        assert_eq!(&goaway[9..13], &3u32.to_be_bytes(), "the last stream seen");
        assert_eq!(&goaway[13..17], &ENHANCE_YOUR_CALM.to_be_bytes());
        assert_eq!(&goaway[17..], b"too_many_pings");
        let mut http1 = Policy::new(Duration::from_secs(5));
        assert_eq!(http1.client_sent(b"GET /health HTTP/1.1\r\n"), Some(false));
    }
}
