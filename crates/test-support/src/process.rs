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
        let port = free_port();
        let binary = bin_dir().join(name);
        assert!(
            binary.exists(),
            "{} is missing: run `cargo build --workspace --bins` first",
            binary.display()
        );
        let log_dir = std::env::temp_dir().join("seckill-test-logs");
        std::fs::create_dir_all(&log_dir).expect("a log folder");
        let log =
            std::fs::File::create(log_dir.join(format!("{name}-{port}.log"))).expect("a log file");
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
        let process = Self { name, port, child };
        process.wait_ready(Duration::from_secs(60)).await;
        process
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self, timeout: Duration) {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(response) = client.get(format!("{}/readyz", self.url())).send().await
                && response.status().is_success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not become ready within {timeout:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM, then wait for the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        self.child
            .wait()
            .await
            .expect("the child can be waited for")
    }
}
