//! The Redis connection pool: deadpool-redis's connections, recycled without a round trip
//! while they are in steady use.
//!
//! deadpool-redis checks every connection it lends with `UNWATCH` + `PING`: one more round
//! trip per call, as many as the call itself on the purchase path (one `EVALSHA`). Here,
//! as in order-store's MySQL pool, a connection is checked only when it has been idle
//! for [`VERIFY_AFTER_IDLE`] (a restart or a proxy may have closed it unnoticed), and one
//! whose call lost it is never lent again (see [`PooledConnection`]).

use std::time::Duration;

use deadpool::managed::{self, Metrics, Object, RecycleResult};
use deadpool_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use deadpool_redis::redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

/// A connection last lent longer ago than this is checked with deadpool-redis's own
/// `UNWATCH` + `PING` before it is lent again.
const VERIFY_AFTER_IDLE: Duration = Duration::from_secs(1);

pub(crate) type Pool = managed::Pool<Manager>;
pub(crate) type PoolError = managed::PoolError<RedisError>;

/// deadpool-redis's manager (it makes the connections), with the recycling above.
pub(crate) struct Manager {
    pub(crate) connections: deadpool_redis::Manager,
    /// How long a connection itself waits for an answer: past the cache's own timeout, so
    /// that the cache's is the one that gives up, saying whether the call was sent
    /// (`CacheError::Unanswered`). redis-rs gives every multiplexed connection a response
    /// timeout of its own, 500 ms, which cut every call short of a `redis.timeout_ms` set
    /// above it.
    pub(crate) response_timeout: Duration,
}

impl managed::Manager for Manager {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut conn = self.connections.create().await?;
        conn.set_response_timeout(self.response_timeout);
        Ok(conn)
    }

    async fn recycle(
        &self,
        conn: &mut MultiplexedConnection,
        metrics: &Metrics,
    ) -> RecycleResult<RedisError> {
        if metrics.last_used() < VERIFY_AFTER_IDLE {
            return Ok(());
        }
        self.connections.recycle(conn, metrics).await
    }
}

/// A lent connection that leaves the pool for good, instead of going back, when a call
/// on it lost the connection or was abandoned half-way (a timeout dropped it): the next
/// caller must not be lent a connection that can only fail.
pub(crate) struct PooledConnection {
    conn: Option<Object<Manager>>,
    broken: bool,
}

impl PooledConnection {
    pub(crate) fn new(conn: Object<Manager>) -> Self {
        Self {
            conn: Some(conn),
            broken: false,
        }
    }

    fn inner(&mut self) -> &mut MultiplexedConnection {
        self.conn
            .as_mut()
            .expect("the connection is only taken out on drop")
    }

    /// Called before a call is sent: until [`PooledConnection::answered`], the connection
    /// counts as broken, so that a call dropped before its answer (a timeout) leaves it so.
    fn sending(&mut self) -> &mut MultiplexedConnection {
        self.broken = true;
        self.inner()
    }

    fn answered<T>(&mut self, result: RedisResult<T>) -> RedisResult<T> {
        self.broken = matches!(&result, Err(e) if loses_connection(e));
        result
    }
}

fn loses_connection(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}

impl Drop for PooledConnection {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.broken
        {
            drop(Object::take(conn));
        }
    }
}

impl ConnectionLike for PooledConnection {
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
        self.conn.as_ref().map_or(0, |conn| conn.get_db())
    }
}
