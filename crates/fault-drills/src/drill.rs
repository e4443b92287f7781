//! One drill: the drills' stack to itself (a machine-wide lock), a database, Redis key
//! prefix, topic and groups of its own on it, and the three services as real processes
//! that it can start, kill, stop and restart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use domain::ProductId;
use test_support::process::{ServiceProcess, bin_dir, free_port, repo_root};
use test_support::redis::TestRedis;
use test_support::stack::TestStack;

use crate::crowd::{Crowd, CrowdPlan};
use crate::stack::{self, Component};

/// The one product every drill sells: each drill has a database and key prefix of its own,
/// so nothing else can be selling it.
pub const PRODUCT: ProductId = ProductId(7);

/// Held for a drill's whole life. Machine-wide (not per checkout) because the drills' ports
/// are: two clones running drills at once would share, and kill, the same servers.
fn lock_path() -> PathBuf {
    std::env::temp_dir().join(format!("seckill-fault-drills-{}.lock", stack::BROKER_PORT))
}

/// What a service built with its `failpoints` feature logs at start-up when `FAILPOINTS`
/// arms any point. A service that gains fail points must log it too: it is how a drill tells
/// an armed binary from one built without them.
pub const ARMED: &str = "Fail points armed";

/// A service binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    Gateway,
    Consumer,
    Reconciler,
}

impl Service {
    pub fn binary(self) -> &'static str {
        match self {
            Self::Gateway => "gateway-svc",
            Self::Consumer => "order-consumer-svc",
            Self::Reconciler => "reconcile-svc",
        }
    }

    fn listen_var(self) -> &'static str {
        match self {
            Self::Gateway => "SECKILL_GATEWAY__LISTEN",
            Self::Consumer => "SECKILL_CONSUMER__LISTEN",
            Self::Reconciler => "SECKILL_RECONCILE__LISTEN",
        }
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.binary())
    }
}

/// A product on sale in a drill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sale {
    pub product: ProductId,
    /// Units put on sale: what every invariant of the audit adds up to.
    pub stock: i64,
}

/// How a graceful stop went.
#[derive(Debug, Clone, Copy)]
pub struct Stopped {
    pub status: ExitStatus,
    /// From SIGTERM to the exit.
    pub took: Duration,
}

/// What `reconcile-svc --once` said.
#[derive(Debug, Clone)]
pub struct ReconcileRun {
    pub status: ExitStatus,
    /// The report table (stdout).
    pub table: String,
    pub stderr: String,
}

impl ReconcileRun {
    /// Exit 0 and a report of no discrepancy at all: nothing to repair, nothing repaired.
    pub fn is_clean(&self) -> bool {
        self.status.success() && self.table.contains("0 discrepancies")
    }
}

/// A drill in progress. Dropping it kills its services, restarts every stack component it
/// stopped or killed, deletes its database and keys, and lets the next drill in.
pub struct Drill {
    // Field order is drop order: processes before the database they write to; the lock last.
    services: BTreeMap<Service, ServiceProcess>,
    pub stack: TestStack,
    name: &'static str,
    env: BTreeMap<String, String>,
    /// A restarted service gets its old port back, so a crowd keeps its gateway's URL.
    ports: BTreeMap<Service, u16>,
    /// Logs of every process this drill started, for the failure message.
    logs: BTreeSet<PathBuf>,
    /// Components this drill took down and has not brought back.
    down: BTreeSet<Component>,
    /// Components this drill froze and has not thawed.
    frozen: BTreeSet<Component>,
    started: Instant,
    _lock: std::fs::File,
}

impl std::fmt::Debug for Drill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drill")
            .field("name", &self.name)
            .field("stack", &self.stack)
            .finish_non_exhaustive()
    }
}

impl Drill {
    /// Waits for the drills' stack to be free, brings it up (healing whatever an earlier,
    /// failed drill left down) and makes this drill's isolated piece of it.
    pub async fn begin(name: &'static str) -> Self {
        let lock = take_lock().await;
        stack::up().await;
        let stack = TestStack::on(&stack::servers()).await;
        let env = stack.env();
        eprintln!(
            "drill {name}: database {}, Redis prefix {}, topic {}",
            stack.db.name(),
            stack.redis.prefix(),
            stack.topic()
        );
        Self {
            services: BTreeMap::new(),
            stack,
            name,
            env,
            ports: BTreeMap::new(),
            logs: BTreeSet::new(),
            down: BTreeSet::new(),
            frozen: BTreeSet::new(),
            started: Instant::now(),
            _lock: lock,
        }
    }

    /// Moves the drill to another Redis (a Sentinel group, a cluster of its own): the audit
    /// and every service started from now on use it. Before any service starts.
    pub fn use_redis(&mut self, redis: TestRedis) {
        assert!(
            self.services.is_empty(),
            "drill {}: services already run on the stack's Redis",
            self.name
        );
        for (key, value) in redis.service_env() {
            self.env.insert(key.to_owned(), value);
        }
        self.stack.redis = redis;
    }

    /// Sets `SECKILL_…` (or any) variable for every service started from now on.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.insert(key.to_owned(), value.to_owned());
    }

    /// The variables the services start with: the drill's stack and quick test timings.
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// Defines `stock` units of [`PRODUCT`] in MySQL and loads them in Redis, open now, one
    /// unit per buyer — what an admin PUT does, without needing a gateway.
    pub async fn open_sale(&self, stock: i64) -> Sale {
        self.stack.open_sale(PRODUCT, stock, 1).await;
        Sale {
            product: PRODUCT,
            stock,
        }
    }

    /// Sends a crowd at the sale through the gateway's address (which stays the same
    /// across restarts).
    pub fn crowd(&self, sale: &Sale, plan: CrowdPlan) -> Crowd {
        Crowd::start(self.url(Service::Gateway), sale.product, plan)
    }

    /// Starts `service` and waits until `/readyz` answers.
    pub async fn start(&mut self, service: Service) {
        self.start_with(service, &[]).await;
    }

    /// [`Drill::start`] with extra variables for this run only, e.g. `FAILPOINTS`.
    pub async fn start_with(&mut self, service: Service, extra: &[(&str, &str)]) {
        self.spawn_with(service, extra).await;
        self.process_mut(service)
            .wait_ready(Duration::from_secs(60))
            .await;
    }

    /// Starts `service` without waiting for it to be ready: for a process armed to crash
    /// on its first batch, which may come before `/readyz` first answers.
    ///
    /// With `FAILPOINTS` among `extra`, waits until the service logs [`ARMED`]: a binary
    /// built without its `failpoints` feature ignores the variable, and the drill would
    /// wait for a crash that never comes.
    pub async fn spawn_with(&mut self, service: Service, extra: &[(&str, &str)]) {
        assert!(
            !self.is_running(service),
            "{service} is already running in drill {}",
            self.name
        );
        let mut env = self.env.clone();
        env.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let port = *self.ports.entry(service).or_insert_with(free_port);
        // The log is appended to across restarts: only this run's lines count, so its length
        // is taken before the process starts writing to it.
        let log = test_support::process::log_path_of(service.binary(), port);
        let from = std::fs::metadata(&log).map_or(0, |m| m.len());
        let process =
            ServiceProcess::spawn_on(service.binary(), service.listen_var(), port, &env, &[]);
        debug_assert_eq!(process.log_path(), log);
        self.logs.insert(log.clone());
        self.services.insert(service, process);
        if extra.iter().any(|(k, _)| *k == "FAILPOINTS") {
            self.until_logged(service, &log, from).await;
        }
    }

    /// Waits for [`ARMED`] in `service`'s log after byte `from`; panics when the process
    /// exits or 30 s pass first.
    async fn until_logged(&mut self, service: Service, log: &std::path::Path, from: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read(log).unwrap_or_default();
            let tail = text.get(from as usize..).unwrap_or_default();
            if String::from_utf8_lossy(tail).contains(ARMED) {
                return;
            }
            let exited = self
                .process_mut(service)
                .wait_exit(Duration::from_millis(100))
                .await;
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "{service} did not log \"{ARMED}\" (it {}): was it built without its fail \
                 points? `cargo build --workspace --bins --features {service}/failpoints`, \
                 and nothing built it again without them since; see {}",
                exited.map_or("still runs".to_owned(), |s| format!("exited: {s}")),
                log.display()
            );
        }
    }

    /// True while the drill holds a process of `service` (it may have exited unnoticed).
    pub fn is_running(&self, service: Service) -> bool {
        self.services.contains_key(&service)
    }

    /// `http://127.0.0.1:<port>` of `service`, also while it is down between restarts.
    pub fn url(&self, service: Service) -> String {
        let port = self
            .ports
            .get(&service)
            .unwrap_or_else(|| panic!("{service} was never started"));
        format!("http://127.0.0.1:{port}")
    }

    pub fn process(&self, service: Service) -> &ServiceProcess {
        self.services
            .get(&service)
            .unwrap_or_else(|| panic!("{service} is not running"))
    }

    fn process_mut(&mut self, service: Service) -> &mut ServiceProcess {
        self.services
            .get_mut(&service)
            .unwrap_or_else(|| panic!("{service} is not running"))
    }

    fn take(&mut self, service: Service) -> ServiceProcess {
        self.services
            .remove(&service)
            .unwrap_or_else(|| panic!("{service} is not running"))
    }

    /// SIGKILL, and wait until the process is gone.
    pub async fn kill(&mut self, service: Service) -> ExitStatus {
        self.take(service).kill().await
    }

    /// SIGTERM, and wait up to `within` for the exit. Panics when it has not exited by then.
    pub async fn terminate(&mut self, service: Service, within: Duration) -> Stopped {
        let mut process = self.take(service);
        let sent = Instant::now();
        process.signal("TERM");
        match process.wait_exit(within).await {
            Some(status) => Stopped {
                status,
                took: sent.elapsed(),
            },
            None => panic!(
                "{service} still runs {within:?} after SIGTERM; see {}",
                process.log_path().display()
            ),
        }
    }

    /// Waits up to `within` for `service` to end by itself (a crash point). Panics when it
    /// still runs then, naming the likely cause.
    pub async fn until_exit(&mut self, service: Service, within: Duration) -> ExitStatus {
        let process = self.process_mut(service);
        match process.wait_exit(within).await {
            Some(status) => {
                self.services.remove(&service);
                status
            }
            None => panic!(
                "{service} still runs after {within:?}. If a fail point was meant to end it, \
                 were the binaries built with it? \
                 `cargo build --workspace --bins --features order-consumer-svc/failpoints`; \
                 see {}",
                process.log_path().display()
            ),
        }
    }

    /// Reads `/metrics` of `service` and adds up every series of the metric `name`
    /// (all label sets); 0 when it has none yet.
    pub async fn metric(&self, service: Service, name: &str) -> f64 {
        crate::metrics::sum(&self.metrics_text(service).await, name)
    }

    /// [`Drill::metric`] over the series of `name` whose labels include `label`, written as
    /// in the exposition (`outcome="accepted"`).
    pub async fn metric_where(&self, service: Service, name: &str, label: &str) -> f64 {
        crate::metrics::sum_where(&self.metrics_text(service).await, name, label)
    }

    /// The status `/readyz` of `service` answers now.
    pub async fn readiness(&self, service: Service) -> u16 {
        self.get(service, "/readyz").await.status().as_u16()
    }

    async fn metrics_text(&self, service: Service) -> String {
        self.get(service, "/metrics")
            .await
            .error_for_status()
            .unwrap_or_else(|e| panic!("GET /metrics of {service:?}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("GET /metrics of {service:?}: {e}"))
    }

    /// `GET path` of `service`; panics when no answer comes within 5 s.
    async fn get(&self, service: Service, path: &str) -> reqwest::Response {
        let url = format!("{}{path}", self.url(service));
        reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("an HTTP client")
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
    }

    /// CPU time (user + system) `service` has used since it started, from `/proc`.
    pub fn cpu_seconds(&self, service: Service) -> f64 {
        let pid = self
            .process(service)
            .pid()
            .unwrap_or_else(|| panic!("{service} has exited"));
        crate::metrics::cpu_seconds(pid)
            .unwrap_or_else(|e| panic!("CPU time of {service} (pid {pid}): {e}"))
    }

    /// Where `service`'s log is.
    pub fn log(&self, service: Service) -> PathBuf {
        self.process(service).log_path().to_path_buf()
    }

    /// SIGKILL to a stack component; [`Drill::start_component`] brings it back (the drill
    /// does too when it ends).
    pub async fn kill_component(&mut self, component: Component) {
        self.down.insert(component);
        stack::kill(component).await;
    }

    /// SIGTERM to a stack component (SIGKILL after the script's timeout).
    pub async fn stop_component(&mut self, component: Component) {
        self.down.insert(component);
        stack::stop(component).await;
    }

    /// SIGSTOP to a stack component: it answers nothing until [`Drill::thaw_component`]
    /// (or the drill's end), then runs what waited in its connections.
    pub async fn freeze_component(&mut self, component: Component) {
        self.frozen.insert(component);
        stack::freeze(component).await;
    }

    /// SIGCONT to a frozen stack component.
    pub async fn thaw_component(&mut self, component: Component) {
        stack::thaw(component).await;
        self.frozen.remove(&component);
    }

    /// Starts a stack component and waits until it answers.
    pub async fn start_component(&mut self, component: Component) {
        stack::start(component).await;
        self.down.remove(&component);
    }

    /// Deletes a stack component's data (for Redis: every drill's keys); running, it is
    /// killed and started again empty.
    pub async fn wipe_component(&mut self, component: Component) {
        stack::wipe(component).await;
    }

    /// `reconcile-svc --once --product <product>` on the drill's stack.
    pub async fn reconcile_once(&self, product: ProductId) -> ReconcileRun {
        let output = tokio::process::Command::new(bin_dir().join(Service::Reconciler.binary()))
            .args(["--once", "--product", &product.to_string()])
            .envs(&self.env)
            .env("SECKILL_CONFIG_DIR", repo_root().join("config"))
            .kill_on_drop(true)
            .output()
            .await
            .expect("reconcile-svc runs");
        ReconcileRun {
            status: output.status,
            table: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `sql` (a query whose one row has one integer column named `n`) on the drill's
    /// database, e.g. `SELECT COUNT(*) AS n FROM reconcile_run WHERE finished_at IS NULL`.
    pub async fn count(&self, sql: &str) -> i64 {
        use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = AsyncMysqlConnection::establish(self.stack.db.url())
            .await
            .unwrap_or_else(|e| panic!("connecting to the drill's database: {e}"));
        diesel::sql_query(sql)
            .get_result::<Count>(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .n
    }

    /// Waits until no statement runs on the drill's database but this check's own: after a
    /// process died, a COMMIT it had sent may still be finishing on the server, and a reading
    /// taken before it ends would miss those orders.
    pub async fn until_mysql_idle(&self, within: Duration) {
        #[derive(diesel::QueryableByName)]
        struct Busy {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let name = self.stack.db.name().to_owned();
        let url = self.stack.db.url().to_owned();
        crate::eventually(within, "no statement running in MySQL", || async {
            use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
            let mut conn = AsyncMysqlConnection::establish(&url).await.ok()?;
            let busy = diesel::sql_query(
                "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST \
                 WHERE DB = ? AND ID <> CONNECTION_ID() AND COMMAND <> 'Sleep'",
            )
            .bind::<diesel::sql_types::Varchar, _>(&name)
            .get_result::<Busy>(&mut conn)
            .await
            .ok()?;
            (busy.n == 0).then_some(())
        })
        .await;
    }

    /// Every log a failed drill's reader wants: the services' and the stack's.
    pub fn log_paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.logs.iter().cloned().collect();
        paths.extend(
            [
                Component::Redis,
                Component::Mariadb,
                Component::Namesrv,
                Component::Broker,
            ]
            .map(stack::log_of),
        );
        paths
    }

    /// Since [`Drill::begin`] returned.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for Drill {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("drill {} failed; logs:", self.name);
            for path in self.log_paths() {
                eprintln!("  {}", path.display());
            }
        }
        // Before the fields go: dropping the database needs MariaDB back.
        for component in std::mem::take(&mut self.frozen) {
            stack::thaw_blocking(component);
        }
        for component in std::mem::take(&mut self.down) {
            stack::start_blocking(component);
        }
    }
}

async fn take_lock() -> std::fs::File {
    let path = lock_path();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    match file.try_lock() {
        Ok(()) => file,
        Err(std::fs::TryLockError::WouldBlock) => {
            eprintln!(
                "fault-drills: waiting for another drill to finish ({})",
                path.display()
            );
            tokio::task::spawn_blocking(move || {
                file.lock()
                    .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
                file
            })
            .await
            .expect("the lock task does not panic")
        }
        Err(std::fs::TryLockError::Error(e)) => panic!("cannot lock {}: {e}", path.display()),
    }
}
