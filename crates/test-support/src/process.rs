//! Runs the services' real binaries as child processes, for tests that need separate
//! processes (several services, kills, restarts).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// The folder cargo put the workspace's binaries in: test binaries live in its `deps/`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in <target>/<profile>/deps")
        .to_path_buf()
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The repository root, where `config/` lives.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running service binary; killed when dropped.
pub struct ServiceProcess {
    pub name: &'static str,
    pub port: u16,
    child: Child,
    log: PathBuf,
}

impl std::fmt::Debug for ServiceProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceProcess")
            .field("name", &self.name)
            .field("port", &self.port)
            .finish()
    }
}

impl ServiceProcess {
    /// Starts `<bin_dir>/<name>` with `env` and `args`, listening on `port` (through
    /// `listen_var`), and waits until `/readyz` answers 200.
    pub async fn start(
        name: &'static str,
        listen_var: &str,
        env: &BTreeMap<String, String>,
        args: &[&str],
    ) -> Self {
        Self::start_on(name, listen_var, free_port(), env, args).await
    }

    /// [`ServiceProcess::start`] on a given port: a restarted service keeps its address.
    pub async fn start_on(
        name: &'static str,
        listen_var: &str,
        port: u16,
        env: &BTreeMap<String, String>,
        args: &[&str],
    ) -> Self {
        let mut process = Self::spawn_on(name, listen_var, port, env, args);
        process.wait_ready(Duration::from_secs(60)).await;
        process
    }

    /// Starts the binary without waiting for `/readyz`: for a process that may end before
    /// it is ready (a crash point armed for the first batch). The log is appended to, so a
    /// restart on the same port keeps the earlier run's lines above its own.
    pub fn spawn_on(
        name: &'static str,
        listen_var: &str,
        port: u16,
        env: &BTreeMap<String, String>,
        args: &[&str],
    ) -> Self {
        let binary = bin_dir().join(name);
        assert!(
            binary.exists(),
            "{} is missing: run `cargo build --workspace --bins` first",
            binary.display()
        );
        let log_path = log_path_of(name, port);
        std::fs::create_dir_all(log_path.parent().expect("a log folder")).expect("a log folder");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("a log file");
        let child = Command::new(&binary)
            .args(args)
            .envs(env)
            .env(listen_var, format!("127.0.0.1:{port}"))
            .env("SECKILL_CONFIG_DIR", repo_root().join("config"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log handle"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        Self {
            name,
            port,
            child,
            log: log_path,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where the process's stdout and stderr go.
    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }

    /// The process id while the process has not been waited for.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until `/readyz` answers 200. Panics when the process exits first or the
    /// timeout passes, naming its log.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(response) = client.get(format!("{}/readyz", self.url())).send().await
                && response.status().is_success()
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before it was ready; see {}",
                    self.name,
                    self.log.display()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not become ready within {timeout:?}; see {}",
                self.name,
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `signal` (a name `kill` knows: TERM, KILL, STOP, …) without waiting.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{signal}"), &pid.to_string()])
                .status();
        }
    }

    /// The exit status, once the process has ended; `None` if it still runs after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()
            .map(|status| status.expect("the child can be waited for"))
    }

    /// SIGKILL, then wait for the process to be gone.
    pub async fn kill(mut self) -> std::process::ExitStatus {
        self.child.kill().await.expect("the child can be killed");
        self.child
            .wait()
            .await
            .expect("the child can be waited for")
    }

    /// SIGTERM, then wait for the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.child
            .wait()
            .await
            .expect("the child can be waited for")
    }
}

/// Where [`ServiceProcess::spawn_on`] appends the log of `name` listening on `port`: known
/// before the spawn, so a caller can note how long the log was before the process wrote.
pub fn log_path_of(name: &str, port: u16) -> std::path::PathBuf {
    std::env::temp_dir()
        .join("seckill-test-logs")
        .join(format!("{name}-{port}.log"))
}
