//! The server's listener: at most a bounded number of client connections open
//! at once, so that clients can never take the file descriptors the store and
//! the deliveries need.
//!
//! Without a bound, a load balancer or producer that opens a connection for
//! every request it cannot send on an idle one (any open-loop client once
//! Herald answers slowly) takes descriptors until `accept` fails with "too many
//! open files"; SQLite then cannot open its files and webhooks cannot open
//! sockets, so the work already committed stops too. Past the bound, new
//! connections wait in the kernel's listen backlog until one closes.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus::IntGauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::clock::OncePer;
use crate::outbox::metrics::OnGauge;

/// File descriptors kept for everything but client connections, on top of
/// the deliveries' and the database's: Herald's own files (SQLite's, archives,
/// logs), the metrics scrape, DNS and what libraries open.
const RESERVED_DESCRIPTORS: u64 = 256;
/// The fewest client connections a derived bound allows.
const MIN_CONNECTIONS: u64 = 64;
/// How often a full listener is reported while it stays full.
const FULL_REPORT_EVERY: Duration = Duration::from_secs(60);

/// How many client connections may be open at once when the setting leaves it
/// to Herald: what the open-file limit leaves once `other_descriptors` (the
/// deliveries' sockets and the database connections) and a reserve are taken.
pub fn derived_max_connections(open_file_limit: u64, other_descriptors: u64) -> usize {
    let left = open_file_limit.saturating_sub(other_descriptors + RESERVED_DESCRIPTORS);
    left.max(MIN_CONNECTIONS) as usize
}

/// A TCP listener that holds at most `max` accepted connections open.
#[derive(Debug)]
pub struct BoundedListener {
    inner: TcpListener,
    places: Arc<Semaphore>,
    max: usize,
    /// Connections held open now (`herald_http_connections_open`).
    open: IntGauge,
    full_report: OncePer,
}

impl BoundedListener {
    pub fn new(inner: TcpListener, max: usize, open: IntGauge) -> Self {
        let max = max.max(1);
        BoundedListener {
            inner,
            places: Arc::new(Semaphore::new(max)),
            max,
            open,
            full_report: OncePer::new(FULL_REPORT_EVERY),
        }
    }

    async fn place(&mut self) -> Option<OwnedSemaphorePermit> {
        if let Ok(place) = self.places.clone().try_acquire_owned() {
            return Some(place);
        }
        if self.full_report.due() {
            tracing::warn!(
                max_connections = self.max,
                "every client connection place is taken; new connections wait until one closes (http_max_connections)"
            );
        }
        // The semaphore is never closed.
        self.places.clone().acquire_owned().await.ok()
    }
}

impl axum::serve::Listener for BoundedListener {
    type Io = Counted<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let place = self.place().await;
        // axum's own accept: it retries a connection that failed before it was
        // accepted at once, and waits out any other error (out of descriptors)
        // a second instead of spinning.
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let connection = Counted {
            io: stream,
            _place: place,
            _open: OnGauge::count(&self.open),
        };
        (connection, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that frees its place, and is counted out of
/// `herald_http_connections_open`, when it is dropped (closed).
#[derive(Debug)]
pub struct Counted<Io> {
    io: Io,
    _place: Option<OwnedSemaphorePermit>,
    _open: OnGauge,
}

impl<Io> Counted<Io> {
    pub fn get_ref(&self) -> &Io {
        &self.io
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Counted<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Counted<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;

    #[test]
    fn the_derived_bound_leaves_the_reserve_and_keeps_a_floor() {
        assert_eq!(derived_max_connections(20_000, 600), 20_000 - 600 - 256);
        assert_eq!(derived_max_connections(1_024, 600), 1_024 - 600 - 256);
        assert_eq!(derived_max_connections(800, 600), 64);
        assert_eq!(derived_max_connections(0, 0), 64);
    }

    /// Real sockets on loopback: a third connection is accepted only once one
    /// of the first two has closed.
    #[tokio::test]
    async fn past_the_bound_a_connection_waits_until_one_closes() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let open = IntGauge::new("open", "connections held").unwrap();
        let mut listener = BoundedListener::new(tcp, 2, open.clone());
        let clients: Vec<TcpStream> = futures_util::future::join_all(
            (0..3).map(|_| async { TcpStream::connect(addr).await.unwrap() }),
        )
        .await;
        let first = listener.accept().await;
        let _second = listener.accept().await;
        let mut third = Box::pin(listener.accept());
        // 200 ms: far longer than a loopback accept of a connection already
        // queued (the clients above all completed their handshakes).
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut third)
                .await
                .is_err(),
            "a third connection accepted past a bound of 2"
        );
        assert_eq!(open.get(), 2);
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("the third connection accepted once the first closed");
        assert_eq!(open.get(), 2);
        drop(third);
        drop(_second);
        assert_eq!(open.get(), 0, "closed connections are no longer counted");
        drop(clients);
    }
}
