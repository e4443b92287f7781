//! The Redis connections: deadpool-redis makes and checks them; each is lent to every call
//! at once.
//!
//! **Shared, not lent one call at a time.** A redis-rs `MultiplexedConnection` takes calls
//! from many tasks at once: its driver writes whatever calls are queued in one write, and
//! Redis, reading them in one read, answers them in one write too. Lent to one call at a
//! time, as a pool lends its objects, each call would be a write and a read of its own on
//! both sides; shared, under a crowd many purchases go out together (the figures are in
//! docs/bench/experiments.md). So a [`SharedConnection`] keeps one pooled connection and
//! lends it to every call; it is *retired* — no new call gets it, and it is closed once the
//! calls on it are done — when a call on it
//! - lost it (an I/O error, a dropped connection), or
//! - gave up waiting for its answer (the cache's timeout dropped the call): a connection
//!   left half-open by a failover answers nothing and reports nothing, and only that tells.
//!
//! A call refused `READONLY` retires its connection too: it reached a primary that a
//! Sentinel failover has turned into a replica, and the next connection is made to the new
//! primary (see the `topology` module).
//!
//! **Checked only when idle.** deadpool-redis checks every connection it lends with
//! `UNWATCH` + `PING`: one more round trip per call, as many as the call itself on the
//! purchase path (one `EVALSHA`). Here, as in order-store's MySQL pool, a connection is
//! checked only when it has not been lent for [`VERIFY_AFTER_IDLE`] (a restart or a proxy
//! may have closed it unnoticed): it then goes back to the pool, which checks it with a
//! `PING` before lending it again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool::managed::{self, Metrics, Object, RecycleError, RecycleResult};
use deadpool_redis::redis::aio::ConnectionLike;
use deadpool_redis::redis::{
    self, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use crate::topology::{Connection, Topology};

/// A connection last lent longer ago than this goes back to the pool, which checks it with
/// a `PING` before it is lent again.
const VERIFY_AFTER_IDLE: Duration = Duration::from_secs(1);

pub(crate) type Pool = managed::Pool<Manager>;
pub(crate) type PoolError = managed::PoolError<RedisError>;

/// Makes the connections through the topology, and recycles them as above.
pub(crate) struct Manager {
    pub(crate) topology: Topology,
    /// How long a connection itself waits for an answer: past the cache's own timeout, so
    /// that the cache's is the one that gives up, saying whether the call was sent
    /// (`CacheError::Unanswered`). redis-rs gives every multiplexed connection a response
    /// timeout of its own, which would cut short every call under a `redis.timeout_ms` set
    /// above it.
    pub(crate) response_timeout: Duration,
}

impl managed::Manager for Manager {
    type Type = Connection;
    type Error = RedisError;

    async fn create(&self) -> Result<Connection, RedisError> {
        self.topology.connect(self.response_timeout).await
    }

    async fn recycle(&self, conn: &mut Connection, metrics: &Metrics) -> RecycleResult<RedisError> {
        if metrics.last_used() < VERIFY_AFTER_IDLE {
            return Ok(());
        }
        let pong: String = redis::cmd("PING")
            .query_async(conn)
            .await
            .map_err(RecycleError::Backend)?;
        if pong != "PONG" {
            return Err(RecycleError::message(format!("PING answered {pong}")));
        }
        Ok(())
    }
}

/// One pooled connection lent to every call at once, replaced when a call retires it (see
/// the module docs). One call at a time takes the next one from the pool; the calls that
/// come meanwhile wait for it rather than each opening one (a crowd's first purchases, or
/// the ones after a failed call, would otherwise open as many as the pool allows).
pub(crate) struct SharedConnection {
    pool: Pool,
    current: Mutex<Option<InUse>>,
    opening: tokio::sync::Mutex<()>,
}

struct InUse {
    held: Arc<Held>,
    last_lent: Instant,
}

impl SharedConnection {
    pub(crate) fn new(pool: Pool) -> Self {
        Self {
            pool,
            current: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    /// The connection for one call.
    pub(crate) async fn lend(&self) -> Result<CallConnection, PoolError> {
        if let Some(held) = self.usable() {
            return Ok(CallConnection::new(held));
        }
        let _opening = self.opening.lock().await;
        if let Some(held) = self.usable() {
            return Ok(CallConnection::new(held));
        }
        let held = Arc::new(Held::new(self.pool.get().await?));
        *self.lock() = Some(InUse {
            held: Arc::clone(&held),
            last_lent: Instant::now(),
        });
        Ok(CallConnection::new(held))
    }

    /// The current connection, unless it is retired or has been idle too long: then it is
    /// let go (to the pool, or closed if retired) and there is none.
    fn usable(&self) -> Option<Arc<Held>> {
        let mut current = self.lock();
        let in_use = current.as_mut().filter(|in_use| {
            !in_use.held.is_retired() && in_use.last_lent.elapsed() < VERIFY_AFTER_IDLE
        });
        let Some(in_use) = in_use else {
            *current = None;
            return None;
        };
        in_use.last_lent = Instant::now();
        Some(Arc::clone(&in_use.held))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<InUse>> {
        // Nothing panics while holding it; a poisoned slot still holds a usable value.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A pooled connection and whether a call on it retired it. Dropped by its last user: back
/// to the pool, or, retired, closed for good, so no later call is lent one that can only fail.
struct Held {
    conn: Option<Object<Manager>>,
    retired: AtomicBool,
}

impl Held {
    fn new(conn: Object<Manager>) -> Self {
        Self {
            conn: Some(conn),
            retired: AtomicBool::new(false),
        }
    }

    fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    fn connection(&self) -> Connection {
        let conn = self
            .conn
            .as_ref()
            .expect("the connection is only taken out on drop");
        Connection::clone(conn)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.is_retired()
        {
            drop(Object::take(conn));
        }
    }
}

/// The shared connection as one call uses it. Until the call is answered it counts as
/// failed, so that a call dropped before its answer (a timeout) retires the connection.
pub(crate) struct CallConnection {
    held: Arc<Held>,
    conn: Connection,
    failed: bool,
}

impl CallConnection {
    fn new(held: Arc<Held>) -> Self {
        let conn = held.connection();
        Self {
            held,
            conn,
            failed: false,
        }
    }

    fn sending(&mut self) -> &mut Connection {
        self.failed = true;
        &mut self.conn
    }

    /// No later call gets this connection: its server answered, but not as the primary it
    /// was taken for (see the `topology` module).
    pub(crate) fn retire(&mut self) {
        self.failed = true;
    }

    fn answered<T>(&mut self, result: RedisResult<T>) -> RedisResult<T> {
        self.failed = matches!(&result, Err(e) if loses_connection(e));
        result
    }
}

fn loses_connection(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.is_unrecoverable_error()
        || error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

impl Drop for CallConnection {
    fn drop(&mut self) {
        if self.failed {
            self.held.retired.store(true, Ordering::Relaxed);
        }
    }
}

impl ConnectionLike for CallConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let result = self.sending().req_packed_command(cmd).await;
            self.answered(result)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let result = self
                .sending()
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.answered(result)
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
