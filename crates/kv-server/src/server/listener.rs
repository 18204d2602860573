//! The client port's listener, with a bound on open connections. Each
//! accepted connection holds a permit until it closes; at the bound, new
//! connections wait in the kernel's accept backlog instead of taking more
//! memory.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Open client connections per listener. etcd's benchmark drives 1000
/// clients over 100 connections and a Kubernetes API server keeps a few
/// per member; each HTTP/2 connection can buffer up to a few hundred KiB,
/// so 2048 connections bound that memory to the order of 500 MiB at worst
/// while leaving 20× headroom over the heaviest documented load.
pub const CLIENT_CONNECTIONS_MAX: usize = 2048;

/// Pause after a failed accept (out of file descriptors, say) before
/// trying again, so a persistent failure does not spin.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(10);

pub struct BoundedListener {
    listener: TcpListener,
    permits: Arc<Semaphore>,
}

impl BoundedListener {
    pub fn new(listener: TcpListener, connections_max: usize) -> BoundedListener {
        BoundedListener {
            listener,
            permits: Arc::new(Semaphore::new(connections_max)),
        }
    }
}

/// A client connection and the permit it holds while open.
pub struct Connection {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl axum::serve::Listener for BoundedListener {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        loop {
            match self.listener.accept().await {
                Ok((stream, address)) => {
                    let _ = stream.set_nodelay(true);
                    return (
                        Connection {
                            stream,
                            _permit: permit,
                        },
                        address,
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, "accepting a client connection failed");
                    tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(context, buffer)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(mut self: Pin<&mut Self>, context: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(context, bytes)
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(context)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(context, buffers)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener as _;

    // Goal: at the bound, a further connection is not accepted until one
    // closes. Method: a bound of 1 on a real loopback listener.
    #[tokio::test]
    async fn connections_beyond_the_bound_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut bounded = BoundedListener::new(listener, 1);
        let _first_client = TcpStream::connect(address).await.unwrap();
        let (first, _) = bounded.accept().await;
        let _second_client = TcpStream::connect(address).await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(200), bounded.accept()).await;
        assert!(waiting.is_err(), "a second connection was accepted past the bound");
        drop(first);
        let accepted = tokio::time::timeout(Duration::from_secs(2), bounded.accept()).await;
        assert!(
            accepted.is_ok(),
            "the second connection was not accepted after the first closed"
        );
    }
}
