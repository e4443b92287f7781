//! The drills' own Redis, MariaDB, name server and broker: `deploy/local/stack.sh` with a run
//! folder and ports of their own, so that killing one of them never touches the stack the
//! other suites share. Every call goes through the script with the same environment, so the
//! script's pid files, readiness checks and locks apply as for `make stack`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;

use test_support::process::repo_root;
use test_support::stack::Servers;

/// Ports of the drills' stack, apart from the default stack's (16379, 13306, 19876, 20911)
/// and below the ephemeral range the services' ports come from. The broker also takes
/// port − 2 and port + 1 (30909, 30912).
pub const REDIS_PORT: u16 = 26379;
pub const MYSQL_PORT: u16 = 23306;
pub const NAMESRV_PORT: u16 = 29876;
pub const BROKER_PORT: u16 = 30911;
/// The broker's transaction check-back timings: a half message whose end was lost is asked
/// about after ~1–3 s instead of the default's ~5–8 s, which keeps the drills short.
pub const MQ_CHECK_INTERVAL_MS: u32 = 2000;
pub const MQ_TX_TIMEOUT_MS: u32 = 1000;

/// One server of the stack, by the name `stack.sh` knows it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    Redis,
    Mariadb,
    Namesrv,
    Broker,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Mariadb => "mariadb",
            Self::Namesrv => "namesrv",
            Self::Broker => "broker",
        }
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Config, data, logs and pid files of the drills' stack: `<repo>/.run/drills`, or
/// `SECKILL_DRILLS_RUN_DIR` — e.g. a tmpfs when the disk is nearly full, where the broker
/// refuses every write (rocketmq-rust stops writing once 90 % of the disk is unavailable).
pub fn run_dir() -> PathBuf {
    std::env::var_os("SECKILL_DRILLS_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".run").join("drills"))
}

/// Where a component's log is, for a failed drill's message.
pub fn log_of(component: Component) -> PathBuf {
    run_dir()
        .join("stack")
        .join(component.name())
        .join(format!("{component}.log"))
}

/// The servers a drill's [`test_support::stack::TestStack`] is built on.
pub fn servers() -> Servers {
    Servers {
        redis_url: format!("redis://127.0.0.1:{REDIS_PORT}"),
        mysql_url: format!("mysql://seckill:seckill@127.0.0.1:{MYSQL_PORT}"),
        namesrv: format!("127.0.0.1:{NAMESRV_PORT}"),
    }
}

/// The environment `stack.sh` runs with: the drills' run folder, ports and broker timings.
pub fn script_env() -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        ("SECKILL_RUN_DIR", run_dir().display().to_string()),
        ("SECKILL_STACK_REDIS_PORT", REDIS_PORT.to_string()),
        ("SECKILL_STACK_MYSQL_PORT", MYSQL_PORT.to_string()),
        ("SECKILL_STACK_NAMESRV_PORT", NAMESRV_PORT.to_string()),
        ("SECKILL_STACK_BROKER_PORT", BROKER_PORT.to_string()),
        (
            "SECKILL_MQ_CHECK_INTERVAL_MS",
            MQ_CHECK_INTERVAL_MS.to_string(),
        ),
        ("SECKILL_MQ_TX_TIMEOUT_MS", MQ_TX_TIMEOUT_MS.to_string()),
    ])
}

/// `SECKILL_RUN_DIR=… bash deploy/local/stack.sh up` with the drills' environment, as a
/// line to paste into a terminal.
pub fn up_command() -> String {
    let env: Vec<String> = script_env()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{} bash deploy/local/stack.sh up", env.join(" "))
}

fn command(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(repo_root().join("deploy/local/stack.sh"))
        .args(args)
        .envs(script_env())
        .current_dir(repo_root())
        .kill_on_drop(true);
    command
}

async fn run(args: &[&str]) {
    run_with(args, &[]).await;
}

/// [`run`] with `stack.sh` variables of its own on top of [`script_env`].
async fn run_with(args: &[&str], extra: &[(&str, &str)]) {
    let output = command(args)
        .envs(extra.iter().copied())
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run stack.sh {}: {e}", args.join(" ")));
    check(args, &output);
}

/// The drills' broker, restarted with store settings of a drill's own (`stack.sh`'s
/// `SECKILL_MQ_…` variables) for as long as this lives; dropped, even by a failing drill,
/// it restarts the broker with the usual ones. Start the services after it: a client that
/// saw the broker go away keeps its address closed for a while.
#[must_use = "the broker goes back to its usual settings when this is dropped"]
#[derive(Debug)]
pub struct BrokerSettings(());

impl BrokerSettings {
    pub async fn apply(settings: &[(&str, &str)]) -> Self {
        run(&["stop", Component::Broker.name()]).await;
        run_with(&["start", Component::Broker.name()], settings).await;
        Self(())
    }
}

impl Drop for BrokerSettings {
    fn drop(&mut self) {
        run_blocking(&["restart", Component::Broker.name()]);
    }
}

fn check(args: &[&str], output: &Output) {
    assert!(
        output.status.success(),
        "stack.sh {} failed ({}):\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Starts every component that is not running (installing what is missing, the first time
/// only); quick when all are up. Every drill begins with it, so one that failed with a
/// component down does not fail the next.
pub async fn up() {
    run(&["up"]).await;
}

/// SIGKILL: the component's process is gone when this returns.
pub async fn kill(component: Component) {
    run(&["kill", component.name()]).await;
}

/// SIGTERM, and SIGKILL if it has not stopped after the script's timeout.
pub async fn stop(component: Component) {
    run(&["stop", component.name()]).await;
}

/// Starts the component and waits until it answers (the broker: until it has registered).
pub async fn start(component: Component) {
    run(&["start", component.name()]).await;
}

/// Deletes the component's data; a running component is killed first and started again,
/// empty (Redis losing everything, say).
pub async fn wipe(component: Component) {
    run(&["wipe", component.name()]).await;
}

/// SIGSTOP: the component keeps its sockets and takes in what is sent, but runs and answers
/// nothing (a stalled server: a long fork, a swapped-out host, a VM pause).
pub async fn freeze(component: Component) {
    run(&["freeze", component.name()]).await;
}

/// SIGCONT: a frozen component runs what waited in its sockets.
pub async fn thaw(component: Component) {
    run(&["thaw", component.name()]).await;
}

/// [`stop`] then [`start`].
pub async fn restart(component: Component) {
    run(&["restart", component.name()]).await;
}

/// [`start`] for a `Drop`, where nothing can be awaited; failures are printed, not raised.
pub fn start_blocking(component: Component) {
    run_blocking(&["start", component.name()]);
}

/// [`thaw`] for a `Drop`.
pub fn thaw_blocking(component: Component) {
    run_blocking(&["thaw", component.name()]);
}

fn run_blocking(args: &[&str]) {
    let output = std::process::Command::new("bash")
        .arg(repo_root().join("deploy/local/stack.sh"))
        .args(args)
        .envs(script_env())
        .current_dir(repo_root())
        .output();
    match output {
        Ok(output) if output.status.success() => {}
        Ok(output) => eprintln!(
            "fault-drills: stack.sh {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(e) => eprintln!("fault-drills: cannot run stack.sh {}: {e}", args.join(" ")),
    }
}
