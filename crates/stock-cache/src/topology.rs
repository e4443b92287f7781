//! Where the Redis is: one server, the primary that Redis Sentinel names, or a Redis Cluster.
//!
//! Every call of the cache goes through a [`Connection`] made here, so the rest of the crate
//! does not know which it is. The scripts work on all three because every key of a product
//! shares one hash tag (see [`crate::keys`]): in a cluster each script call runs on the node
//! that owns its product's slot.
//!
//! - **Sentinel.** A connection is made to the primary the sentinels name at that moment,
//!   and checked to be one. Sentinel promotes the replica at once but demotes the old
//!   primary only seconds later, at its own pace; meanwhile the old primary still takes
//!   writes, which the failover then discards. With replicas waited for (`WAIT`), those
//!   writes are never acknowledged (the old primary's replica is gone), and a connection
//!   whose `WAIT` came back short is retired, so the next one asks the sentinels again and
//!   reaches the new primary. Once demoted, the old primary drops its clients, and a write it
//!   still gets is refused `READONLY`: both retire the connection too (see the `pool`
//!   module). Without `WAIT` the cache stays on the old primary until it is demoted.
//! - **Cluster.** redis-rs's cluster connection follows `MOVED` and `ASK`, refreshes its slot
//!   map, and sends `SCRIPT LOAD` to every primary, so a script is never missing on the node
//!   a product moves to.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use deadpool_redis::redis::cluster::{ClusterClient, ClusterClientBuilder};
use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use deadpool_redis::redis::{
    self, AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisFuture,
    RedisResult, TlsCertificates, TlsMode, Value,
};

/// How the services reach Redis; cheap to clone. It may carry a password: never printed.
#[derive(Clone)]
pub enum Topology {
    /// One server.
    Standalone(Box<ConnectionInfo>),
    /// The primary of a Sentinel-monitored group.
    Sentinel(Arc<Sentinel>),
    /// A Redis Cluster, found through its seed nodes.
    Cluster(Arc<Cluster>),
}

impl From<ConnectionInfo> for Topology {
    fn from(server: ConnectionInfo) -> Self {
        Self::Standalone(Box::new(server))
    }
}

/// The sentinels and the group they watch. redis-rs's client asks them with `&mut self` (it
/// keeps a connection to the sentinel that answered), hence the lock: a connection is made
/// rarely, and never on a call's path.
pub struct Sentinel {
    client: tokio::sync::Mutex<SentinelClient>,
}

/// A Redis Cluster: the client that makes cluster connections, and the seed nodes, one of
/// which a subscriber listens on (a `PUBLISH` reaches every node of a cluster).
pub struct Cluster {
    client: ClusterClient,
    seeds: Vec<ConnectionInfo>,
}

/// What a Sentinel group is, as the settings describe it.
pub(crate) struct SentinelSpec<'a> {
    pub master_name: &'a str,
    pub sentinels: Vec<ConnectionInfo>,
    /// TLS, credentials and database of the data nodes; its address is not used.
    pub data_nodes: &'a ConnectionInfo,
    pub certificates: Option<TlsCertificates>,
}

impl Topology {
    /// Whether another primary may be named at any time, so that a short `WAIT` may mean
    /// this connection's server is no longer it.
    pub(crate) fn fails_over(&self) -> bool {
        matches!(self, Self::Sentinel(_))
    }

    pub(crate) fn sentinel(spec: SentinelSpec<'_>) -> RedisResult<Self> {
        let sentinels = spec.sentinels.iter().map(|info| info.addr().clone());
        let mut builder =
            SentinelClientBuilder::new(sentinels, spec.master_name, SentinelServerType::Master)?;
        if let Some(tls) = tls_mode(spec.data_nodes.addr()) {
            builder = builder.set_client_to_redis_tls_mode(tls);
        }
        let node = spec.data_nodes.redis_settings();
        builder = builder.set_client_to_redis_db(node.db());
        if let Some(username) = node.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = node.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(first) = spec.sentinels.first() {
            if let Some(tls) = tls_mode(first.addr()) {
                builder = builder.set_client_to_sentinel_tls_mode(tls);
            }
            let sentinel = first.redis_settings();
            if let Some(username) = sentinel.username() {
                builder = builder.set_client_to_sentinel_username(username);
            }
            if let Some(password) = sentinel.password() {
                builder = builder.set_client_to_sentinel_password(password);
            }
        }
        if let Some(certificates) = spec.certificates {
            builder = builder
                .set_client_to_redis_certificates(certificates.clone())
                .set_client_to_sentinel_certificates(certificates);
        }
        Ok(Self::Sentinel(Arc::new(Sentinel {
            client: tokio::sync::Mutex::new(builder.build()?),
        })))
    }

    /// A cluster found through `seeds`, whose first URL's credentials and TLS serve every
    /// node (redis-rs takes them from there).
    pub(crate) fn cluster(
        seeds: Vec<ConnectionInfo>,
        certificates: Option<TlsCertificates>,
        response_timeout: Duration,
    ) -> RedisResult<Self> {
        let mut builder =
            ClusterClientBuilder::new(seeds.clone()).response_timeout(response_timeout);
        if let Some(certificates) = certificates {
            builder = builder.certs(certificates);
        }
        Ok(Self::Cluster(Arc::new(Cluster {
            client: builder.build()?,
            seeds,
        })))
    }

    /// A new connection for calls: to the server, to the primary Sentinel names now, or to
    /// the cluster. It waits `response_timeout` for an answer before failing a call.
    pub(crate) async fn connect(&self, response_timeout: Duration) -> RedisResult<Connection> {
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(response_timeout));
        match self {
            Self::Standalone(server) => Ok(Connection::Node(
                redis::Client::open(server.as_ref().clone())?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            )),
            Self::Sentinel(sentinel) => {
                let mut client = sentinel.client.lock().await;
                let conn = client.get_async_connection_with_config(&config).await?;
                Ok(Connection::Node(conn))
            }
            // The response timeout was given to the client when it was built.
            Self::Cluster(cluster) => Ok(Connection::Cluster(
                cluster.client.get_async_connection().await?,
            )),
        }
    }

    /// A pub/sub connection: to the server, to the primary (where the scripts publish), or to
    /// the first seed node that answers (a cluster forwards every `PUBLISH` to all nodes).
    pub(crate) async fn subscriber(&self) -> RedisResult<PubSub> {
        match self {
            Self::Standalone(server) => {
                redis::Client::open(server.as_ref().clone())?
                    .get_async_pubsub()
                    .await
            }
            Self::Sentinel(sentinel) => {
                let client = sentinel.client.lock().await.async_get_client().await?;
                client.get_async_pubsub().await
            }
            Self::Cluster(cluster) => {
                let mut last_error = None;
                for seed in &cluster.seeds {
                    match redis::Client::open(seed.clone())?.get_async_pubsub().await {
                        Ok(pubsub) => return Ok(pubsub),
                        Err(error) => last_error = Some(error),
                    }
                }
                Err(last_error.unwrap_or_else(|| {
                    (
                        redis::ErrorKind::InvalidClientConfig,
                        "no cluster seed node",
                    )
                        .into()
                }))
            }
        }
    }
}

fn tls_mode(addr: &ConnectionAddr) -> Option<TlsMode> {
    match addr {
        ConnectionAddr::TcpTls { insecure: true, .. } => Some(TlsMode::Insecure),
        ConnectionAddr::TcpTls { .. } => Some(TlsMode::Secure),
        _ => None,
    }
}

/// A connection for calls, of whichever topology; both kinds multiplex the calls of many
/// tasks, and clones share the connection.
#[derive(Clone)]
pub(crate) enum Connection {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}
