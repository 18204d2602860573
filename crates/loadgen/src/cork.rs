//! Coalesces a connection's writes: frames written between two flushes go
//! out in one syscall, and a flush first yields once to the runtime, so
//! requests other clients are about to send join the same write.
//!
//! grpc-go, which etcd's benchmark tool uses, does the same in its writer
//! (it yields before flushing a small batch). hyper's HTTP/2 connection
//! flushes whenever it is polled, which at 1000 clients over 100
//! connections cost about one `writev` per request against etcd's tool's
//! one write per five; the servers then also wake once per request. With
//! this, loadgen's writes per request match etcd's tool's.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes gathered before a write is forced even without a flush: a few
/// hundred small requests, and well under a socket's send buffer.
pub const CORK_BYTES_MAX: usize = 64 << 10;

pub struct Corked<S> {
    inner: S,
    pending: Vec<u8>,
    /// Whether the flush under way has already yielded once.
    yielded: bool,
}

impl<S> Corked<S> {
    pub fn new(inner: S) -> Corked<S> {
        Corked {
            inner,
            pending: Vec::with_capacity(CORK_BYTES_MAX),
            yielded: false,
        }
    }
}

impl<S: AsyncWrite + Unpin> Corked<S> {
    /// Writes out everything pending.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.pending) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(written)) => {
                    self.pending.drain(..written);
                }
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Corked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Corked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.pending.len() >= CORK_BYTES_MAX {
            ready!(self.drain(cx))?;
        }
        self.pending.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.pending.len() >= CORK_BYTES_MAX {
            ready!(self.drain(cx))?;
        }
        let mut written = 0;
        for buf in bufs {
            self.pending.extend_from_slice(buf);
            written += buf.len();
        }
        Poll::Ready(Ok(written))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.pending.is_empty() && !self.yielded {
            // Let the clients woken with this one send their requests
            // first; the runtime polls this connection again right after.
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(self.drain(cx))?;
        self.yielded = false;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // Goal: writes before a flush reach the peer together and in order,
    // and nothing is held back after the flush.
    #[tokio::test]
    async fn writes_go_out_at_the_flush_in_order() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut corked = Corked::new(near);
        corked.write_all(b"one ").await.unwrap();
        corked.write_all(b"two ").await.unwrap();
        let mut buffer = [0u8; 16];
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), far.read(&mut buffer)).await;
        assert!(early.is_err(), "nothing goes out before the flush");
        corked.write_all(b"three").await.unwrap();
        corked.flush().await.unwrap();
        let mut got = vec![0u8; 13];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"one two three");
        // Past the bound, writes go out without a flush.
        let big = vec![7u8; CORK_BYTES_MAX + 1];
        corked.write_all(&big).await.unwrap();
        corked.write_all(b"x").await.unwrap();
        let mut got = vec![0u8; CORK_BYTES_MAX + 1];
        far.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&b| b == 7));
    }
}
