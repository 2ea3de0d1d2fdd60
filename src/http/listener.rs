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
//!
//! A place must also come back: a connection on which nothing has been read or
//! written for `http_idle_timeout_secs` is closed (a client's idle keep-alive
//! connections, or one that stopped reading its answer), so clients that open
//! connections and leave them cannot hold every place for ever.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

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
    /// How long a connection may stay idle, and the count of those closed so.
    idle: Option<(Duration, IntCounter)>,
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
            idle: None,
        }
    }

    /// Closes each connection once nothing has been read from it or written to
    /// it for `after`, counting it in `closed`.
    pub fn closing_idle_after(mut self, after: Duration, closed: IntCounter) -> Self {
        self.idle = Some((after, closed));
        self
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
            idle: self
                .idle
                .as_ref()
                .map(|(after, closed)| IdleDeadline::new(*after, closed.clone())),
        };
        (connection, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that frees its place, and is counted out of
/// `herald_http_connections_open`, when it is dropped (closed); with an idle
/// deadline, a read or write that has waited past it fails with `TimedOut`,
/// and the server closes the connection.
#[derive(Debug)]
pub struct Counted<Io> {
    io: Io,
    _place: Option<OwnedSemaphorePermit>,
    _open: OnGauge,
    idle: Option<IdleDeadline>,
}

/// When a connection has been idle too long: `after` since the last byte read
/// or written. The timer is moved only when it fires, not on every byte.
#[derive(Debug)]
struct IdleDeadline {
    after: Duration,
    last_active: Instant,
    timer: Pin<Box<Sleep>>,
    closed: IntCounter,
}

impl IdleDeadline {
    fn new(after: Duration, closed: IntCounter) -> Self {
        let now = Instant::now();
        IdleDeadline {
            after,
            last_active: now,
            timer: Box::pin(tokio::time::sleep_until(now + after)),
            closed,
        }
    }

    fn active(&mut self) {
        self.last_active = Instant::now();
    }

    /// Whether the connection has been idle for `after` (then counted as closed
    /// idle); if not, the task is woken when it may have been.
    fn passed(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            let due = self.last_active + self.after;
            if due <= Instant::now() {
                self.closed.inc();
                return true;
            }
            self.timer.as_mut().reset(due);
        }
    }
}

impl<Io> Counted<Io> {
    /// `Pending` from the connection, unless it has been idle too long.
    fn pending_or_idle<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let idle_too_long = self.idle.as_mut().is_some_and(|idle| idle.passed(cx));
        if !idle_too_long {
            return Poll::Pending;
        }
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "closed after nothing was read or written for http_idle_timeout_secs",
        )))
    }

    /// A write's result: bytes written are activity; a write the client has not
    /// made room for is idle time too (a client that stopped reading).
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Pending => self.pending_or_idle(cx),
            Poll::Ready(result) => {
                self.note(matches!(result, Ok(n) if n > 0));
                Poll::Ready(result)
            }
        }
    }

    /// Notes activity, if bytes moved.
    fn note(&mut self, moved: bool) {
        if moved {
            if let Some(idle) = &mut self.idle {
                idle.active();
            }
        }
    }
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
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Pending => self.pending_or_idle(cx),
            ready => {
                self.note(buf.filled().len() > before);
                ready
            }
        }
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Counted<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.after_write(cx, written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(cx, written)
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

    /// Real sockets on loopback: a connection whose client writes a byte every
    /// 100 ms stays readable past the idle deadline of 400 ms; once the client
    /// goes quiet, the next read fails with `TimedOut` no sooner than 400 ms
    /// after the last byte, and the closing is counted.
    #[tokio::test]
    async fn a_connection_quiet_past_its_deadline_fails_its_read_and_is_counted() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let after = Duration::from_millis(400);
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let open = IntGauge::new("open", "connections held").unwrap();
        let closed = IntCounter::new("closed", "connections closed idle").unwrap();
        let mut listener =
            BoundedListener::new(tcp, 4, open.clone()).closing_idle_after(after, closed.clone());
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await;
        let mut byte = [0u8; 1];
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.write_all(b"x").await.unwrap();
            server
                .read_exact(&mut byte)
                .await
                .expect("an active connection reads");
        }
        let last_byte = std::time::Instant::now();
        assert_eq!(closed.get(), 0, "an active connection was closed");
        let err = tokio::time::timeout(Duration::from_secs(5), server.read(&mut byte))
            .await
            .expect("the quiet connection's read ends")
            .expect_err("a quiet connection's read fails");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(
            last_byte.elapsed() >= after,
            "closed {:?} after the last byte, before the deadline",
            last_byte.elapsed()
        );
        assert_eq!(closed.get(), 1);
        drop(server);
        assert_eq!(open.get(), 0);
    }
}
