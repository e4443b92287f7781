//! Real Redis topologies of a test's own — a Sentinel group, a Cluster — as child
//! processes on free loopback ports, without persistence. Failover and resharding are
//! what a client gets wrong, and neither can be faked on the shared server nor done to it
//! without disturbing every other test. Every process is killed, and its folder removed,
//! when the topology is dropped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use redis::{AsyncConnectionConfig, FromRedisValue, RedisResult, Value};
use tokio::process::{Child, Command};

use crate::eventually;

/// Generous: a Sentinel failover alone takes several seconds (see
/// [`SentinelGroup::failover`]), and a loaded CI machine must not turn a slow topology into a failed test.
const DEADLINE: Duration = Duration::from_secs(30);
/// Redis Cluster's fixed number of hash slots.
const SLOTS: u16 = 16384;

/// The name the sentinels monitor the primary under: what a Sentinel client is configured with.
pub const MASTER_NAME: &str = "seckill";

/// One `redis-server` in a folder of its own, from a generated config file: a file, not
/// arguments, because a sentinel refuses to start without one it can rewrite.
#[derive(Debug)]
struct Node {
    port: u16,
    /// A cluster node's bus port (the second of its ports), which CLUSTER MEET names.
    bus_port: Option<u16>,
    dir: PathBuf,
    child: Child,
}

/// Times a node may exit before answering, on ports that were taken between being found
/// free and being bound (another test's node, or any outgoing connection's local port).
const ATTEMPTS: usize = 5;

impl Node {
    /// A node on `ports` fresh free ports (its own first; `lines` gets them all), once it
    /// answers PING. A node that exits first is started again on other ports: a port free a
    /// moment ago can be taken by the time redis-server binds it.
    async fn start(kind: &str, ports: usize, lines: impl Fn(&[u16]) -> Vec<String>) -> Self {
        let mut attempt = 1;
        loop {
            let ports = distinct_free_ports(ports);
            let mut node = Self::spawn(kind, ports[0], &lines(&ports));
            node.bus_port = ports.get(1).copied();
            match node.answering().await {
                Ok(()) => return node,
                Err(exited) if attempt < ATTEMPTS => {
                    eprintln!("{exited}; starting it again on other ports");
                    attempt += 1;
                }
                Err(exited) => panic!("{exited}, {ATTEMPTS} times"),
            }
        }
    }

    fn spawn(kind: &str, port: u16, lines: &[String]) -> Self {
        let dir = std::env::temp_dir().join(format!("seckill-test-{kind}-{port}"));
        // A folder left by a killed run would hand a cluster node its old nodes.conf.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a data folder");
        let sentinel = kind == "sentinel";
        let mut text = format!("port {port}\nbind 127.0.0.1\ndir \"{}\"\n", dir.display());
        if !sentinel {
            text += "save \"\"\nappendonly no\n";
        }
        text += &lines.join("\n");
        let conf = dir.join(format!("{kind}.conf"));
        std::fs::write(&conf, text).expect("a config file");
        // Its log, for why a node that exits at start did (a port taken, a bad line).
        let log = std::fs::File::create(dir.join("redis.log")).expect("a log file");
        let mut command = Command::new("redis-server");
        command.arg(&conf).args(sentinel.then_some("--sentinel"));
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second handle on the log"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server (`bash deploy/local/stack.sh up` installs it): {e}"
                )
            });
        Self {
            port,
            bus_port: None,
            dir,
            child,
        }
    }

    fn url(&self) -> String {
        url_of(self.port)
    }

    /// Until PING answers; `Err` at once, with the end of its log, if the node exits first.
    async fn answering(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + DEADLINE;
        while query::<String>(&self.url(), &["PING"]).await.is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                let last = log.lines().last().unwrap_or("(nothing logged)");
                return Err(format!(
                    "redis-server on port {} exited ({status}): {last}",
                    self.port
                ));
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within {DEADLINE:?}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        // A moment for the process to go, so it does not write into the folder being removed.
        for _ in 0..50 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One primary, one replica of it, and three sentinels monitoring them with a quorum of 2:
/// the smallest group that fails over the way production's does, by agreement.
#[derive(Debug)]
pub struct SentinelGroup {
    data: [Node; 2],
    sentinels: Vec<Node>,
}

impl SentinelGroup {
    /// Returns once the replica is in sync and every sentinel knows the replica and both
    /// other sentinels, so that a failover asked for right away can succeed.
    pub async fn start() -> Self {
        let primary = Node::start("sentinel-primary", 1, |_| Vec::new()).await;
        let primary_port = primary.port;
        let replica = Node::start("sentinel-replica", 1, |_| {
            vec![format!("replicaof 127.0.0.1 {primary_port}")]
        })
        .await;
        let data = [primary, replica];
        let replica = data[1].url();
        eventually(DEADLINE, "the replica in sync with the primary", || async {
            let info: String = query(&replica, &["INFO", "replication"]).await.ok()?;
            info.contains("master_link_status:up").then_some(())
        })
        .await;
        // Only now: a sentinel asks the primary for its replicas every 10 s, and one started
        // before the replica attached would not hear of it for those 10 s.
        let monitor = format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2");
        let mut sentinels = Vec::with_capacity(3);
        for _ in 0..3 {
            let sentinel = Node::start("sentinel", 1, |_| {
                vec![
                    "sentinel resolve-hostnames no".to_owned(),
                    monitor.clone(),
                    format!("sentinel down-after-milliseconds {MASTER_NAME} 1000"),
                    format!("sentinel failover-timeout {MASTER_NAME} 10000"),
                    format!("sentinel parallel-syncs {MASTER_NAME} 1"),
                ]
            })
            .await;
            sentinels.push(sentinel);
        }
        for sentinel in &sentinels {
            let url = sentinel.url();
            let what = format!("sentinel {url} knowing the replica and two other sentinels");
            eventually(DEADLINE, &what, || async {
                let master: Fields = query(&url, &["SENTINEL", "MASTER", MASTER_NAME])
                    .await
                    .ok()?;
                let replicas: Vec<Fields> = query(&url, &["SENTINEL", "REPLICAS", MASTER_NAME])
                    .await
                    .ok()?;
                let has =
                    |fields: &Fields, name, value| fields.get(name).is_some_and(|v| v == value);
                let known = replicas.len() == 1
                    && has(&replicas[0], "flags", "slave")
                    && has(&replicas[0], "master-link-status", "ok")
                    && has(&master, "num-other-sentinels", "2");
                known.then_some(())
            })
            .await;
        }
        Self { data, sentinels }
    }

    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Node::url).collect()
    }

    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The data nodes, the one started as primary first.
    pub fn node_urls(&self) -> Vec<String> {
        self.data.iter().map(Node::url).collect()
    }

    /// The data node the sentinels name as master now, which changes with every failover.
    pub async fn primary_url(&self) -> String {
        master_by(&self.sentinels[0].url())
            .await
            .unwrap_or_else(|e| panic!("SENTINEL GET-MASTER-ADDR-BY-NAME {MASTER_NAME}: {e}"))
    }

    /// Fails the primary over to the other node and returns the new primary's URL once the
    /// group has settled: every sentinel names it, it is master, and the old primary follows
    /// it. The promotion is quick; the old primary is demoted only seconds later, at
    /// Sentinel's own pace, taking writes all along that its resync then throws away — the
    /// window a client must not write into.
    pub async fn failover(&self) -> String {
        let old = self.primary_url().await;
        let new = self
            .node_urls()
            .into_iter()
            .find(|url| *url != old)
            .unwrap();
        let sentinel = self.sentinels[0].url();
        // NOGOODSLAVE while the sentinel's view of the replica is stale; a refused FAILOVER
        // started nothing, so asking again is safe.
        let what = format!("SENTINEL FAILOVER {MASTER_NAME} accepted by {sentinel}");
        eventually(DEADLINE, &what, || async {
            query::<()>(&sentinel, &["SENTINEL", "FAILOVER", MASTER_NAME])
                .await
                .ok()
        })
        .await;
        let what = format!("a failover from {old} to {new}, the old primary its replica");
        eventually(DEADLINE, &what, || async {
            for sentinel in self.sentinel_urls() {
                if master_by(&sentinel).await.ok()? != new {
                    return None;
                }
            }
            let promoted = role(&new).await? == ("master".to_owned(), None);
            let demoted = role(&old).await? == ("slave".to_owned(), Some(port_of(&new)));
            (promoted && demoted).then_some(())
        })
        .await;
        new
    }
}

type Fields = std::collections::HashMap<String, String>;

async fn master_by(sentinel: &str) -> RedisResult<String> {
    let (_host, port): (String, u16) = query(
        sentinel,
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
    )
    .await?;
    Ok(url_of(port))
}

/// ROLE's first word, and for a replica the port of the primary it follows.
async fn role(url: &str) -> Option<(String, Option<u16>)> {
    let reply: Vec<Value> = query(url, &["ROLE"]).await.ok()?;
    let name: String = redis::from_redis_value_ref(reply.first()?).ok()?;
    let primary = match name.as_str() {
        "slave" => Some(redis::from_redis_value_ref(reply.get(2)?).ok()?),
        _ => None,
    };
    Some((name, primary))
}

/// A Redis Cluster of primaries only, the slots split evenly between them: enough for a
/// client to meet MOVED and ASK, to which replicas would add nothing.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
}

impl RedisCluster {
    /// Returns once every node reports `cluster_state:ok` and all agree on who serves every
    /// slot, so a test's first command is not answered by a half-formed cluster.
    pub async fn start(primaries: usize) -> Self {
        assert!(primaries >= 1, "a cluster needs a primary");
        // Bus ports of their own: the default, port + 10000, may be past 65535.
        let mut nodes = Vec::with_capacity(primaries);
        for _ in 0..primaries {
            let node = Node::start("cluster", 2, |ports| {
                vec![
                    "cluster-enabled yes".to_owned(),
                    "cluster-config-file nodes.conf".to_owned(),
                    "cluster-node-timeout 5000".to_owned(),
                    format!("cluster-port {}", ports[1]),
                ]
            })
            .await;
            nodes.push(node);
        }
        let bound = |i: usize| i * usize::from(SLOTS) / primaries;
        for (i, node) in nodes.iter().enumerate() {
            let (first, last) = (bound(i).to_string(), (bound(i + 1) - 1).to_string());
            admin(&node.url(), &["CLUSTER", "ADDSLOTSRANGE", &first, &last]).await;
        }
        for node in &nodes[1..] {
            let port = node.port.to_string();
            let bus = node
                .bus_port
                .expect("a cluster node has a bus port")
                .to_string();
            let meet = ["CLUSTER", "MEET", "127.0.0.1", &port, &bus];
            admin(&nodes[0].url(), &meet).await;
        }
        let cluster = Self { nodes };
        // Each slot was given to one node only, so nodes that each know an owner for every
        // slot, and every node, agree on the whole map.
        let settled = [
            "cluster_state:ok".to_owned(),
            format!("cluster_slots_assigned:{SLOTS}"),
            format!("cluster_known_nodes:{primaries}"),
        ];
        let what = "every node of the cluster ok, knowing all nodes and an owner for every slot";
        eventually(DEADLINE, what, || async {
            for url in cluster.node_urls() {
                let info: String = query(&url, &["CLUSTER", "INFO"]).await.ok()?;
                if !settled.iter().all(|line| info.lines().any(|l| l == line)) {
                    return None;
                }
            }
            Some(())
        })
        .await;
        cluster
    }

    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The node that itself claims `slot` now: during a move, the source until the end.
    pub async fn node_of_slot(&self, slot: u16) -> String {
        for url in self.node_urls() {
            let me = myself(&url).await;
            if me.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)) {
                return url;
            }
        }
        panic!("no node of the cluster claims slot {slot}")
    }

    /// Moves `slot` and its keys to the node at `to` the way `redis-cli --cluster reshard`
    /// does, so a client meets ASK while the keys move and MOVED afterwards.
    pub async fn move_slot(&self, slot: u16, to: &str) {
        let from = self.node_of_slot(slot).await;
        assert!(
            self.node_urls().iter().any(|url| url == to),
            "{to}: not in this cluster"
        );
        if from == to {
            return;
        }
        let (source, target) = (myself(&from).await.id, myself(to).await.id);
        let slot = slot.to_string();
        admin(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source]).await;
        admin(&from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target]).await;
        let port = port_of(to).to_string();
        loop {
            let keys: Vec<String> = query(&from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"])
                .await
                .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT {slot} on {from}: {e}"));
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            migrate.extend(keys.iter().map(String::as_str));
            admin(&from, &migrate).await;
        }
        // The target first: a source told first would send clients to a target that does
        // not yet know it owns the slot.
        let others = (self.node_urls().into_iter()).filter(|url| *url != from && url != to);
        for url in [to.to_owned(), from.clone()].into_iter().chain(others) {
            admin(&url, &["CLUSTER", "SETSLOT", &slot, "NODE", &target]).await;
        }
    }

    /// The slot of `key`, computed here as the cluster spec says (CRC16 of the hash tag if
    /// there is one) so a test can choose keys for a slot without asking a node.
    pub fn key_slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let tag = bytes.iter().position(|&b| b == b'{').and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        });
        let crc = tag.unwrap_or(bytes).iter().fold(0u16, |crc, &byte| {
            (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
                (crc << 1) ^ if crc & 0x8000 == 0 { 0 } else { 0x1021 }
            })
        });
        crc % SLOTS
    }
}

/// One line of CLUSTER NODES: enough to tell who serves what.
struct ClusterNode {
    id: String,
    myself: bool,
    slots: Vec<(u16, u16)>,
}

async fn cluster_nodes(url: &str) -> Option<Vec<ClusterNode>> {
    let text: String = query(url, &["CLUSTER", "NODES"]).await.ok()?;
    let node = |line: &str| {
        let fields: Vec<&str> = line.split(' ').collect();
        let slots = (fields.iter().skip(8))
            // `[slot->-id]`: a slot on the move, still served by the one that claims it.
            .filter(|range| !range.starts_with('['))
            .map(|range| {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                Some((first.parse().ok()?, last.parse().ok()?))
            })
            .collect::<Option<_>>()?;
        Some(ClusterNode {
            id: fields[0].to_owned(),
            myself: fields.get(2)?.split(',').any(|flag| flag == "myself"),
            slots,
        })
    };
    text.lines().map(node).collect()
}

async fn myself(url: &str) -> ClusterNode {
    let nodes = cluster_nodes(url).await;
    (nodes.into_iter().flatten().find(|node| node.myself))
        .unwrap_or_else(|| panic!("CLUSTER NODES on {url} without `myself`"))
}

/// A command that must succeed for the topology to be what the test was promised.
async fn admin(url: &str, args: &[&str]) {
    query::<()>(url, args)
        .await
        .unwrap_or_else(|e| panic!("{} on {url}: {e}", args.join(" ")));
}

/// One command on a connection of its own: nodes come and go under a topology, so none is
/// kept. The response timeout is longer than the client's default 500 ms, which a MIGRATE
/// may need.
async fn query<T: FromRedisValue>(url: &str, args: &[&str]) -> RedisResult<T> {
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    let client = redis::Client::open(url)?;
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(&mut conn)
        .await
}

/// Ports free a moment ago and different from each other: two nodes given one port would
/// fail in a way that is slow to see.
fn distinct_free_ports(count: usize) -> Vec<u16> {
    let mut ports = Vec::with_capacity(count);
    while ports.len() < count {
        let port = crate::process::free_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

fn url_of(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

fn port_of(url: &str) -> u16 {
    (url.rsplit(':').next().and_then(|port| port.parse().ok()))
        .unwrap_or_else(|| panic!("no port in {url}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[should_panic(expected = "Bad directive or wrong number of arguments, 5 times")]
    async fn a_node_that_exits_at_start_is_tried_again_then_reported_with_its_log() {
        let retried_on_other_ports =
            Node::start("broken", 1, |_| vec!["no-such-directive yes".to_owned()]);
        retried_on_other_ports.await;
    }
}
