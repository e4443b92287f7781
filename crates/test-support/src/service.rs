//! A service running in this test process, on a thread of its own with its own actix
//! System — as in its real `main` — so that the runtimes it owns (the RocketMQ client's,
//! the confirm/writer runtimes) are started and dropped where they belong, never inside
//! the test's runtime. Dropping the handle stops it gracefully and waits for it.

use std::future::Future;
use std::thread::JoinHandle;

use platform::shutdown::Shutdown;
use tokio::sync::oneshot;

/// Hands the bound port back to the test once the service is built.
pub type PortSender = oneshot::Sender<u16>;

pub struct InProcessService {
    pub port: u16,
    shutdown: Shutdown,
    thread: Option<JoinHandle<anyhow::Result<()>>>,
}

impl std::fmt::Debug for InProcessService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessService")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl InProcessService {
    /// Runs `run(shutdown, port_sender)` on its own thread; returns once the port is sent.
    /// Panics with the build error when the service fails before sending its port.
    pub async fn start<F, Fut>(name: &str, run: F) -> Self
    where
        F: FnOnce(Shutdown, PortSender) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + 'static,
    {
        let shutdown = Shutdown::new();
        let (port_tx, port_rx) = oneshot::channel();
        let token = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name(format!("test-{name}"))
            .spawn(move || actix_web::rt::System::new().block_on(run(token, port_tx)))
            .expect("a service thread");
        match port_rx.await {
            Ok(port) => Self {
                port,
                shutdown,
                thread: Some(thread),
            },
            Err(_) => {
                let error = match thread.join() {
                    Ok(Err(error)) => format!("{error:#}"),
                    Ok(Ok(())) => "it returned without starting".to_owned(),
                    Err(_) => "it panicked".to_owned(),
                };
                panic!("{name} did not start: {error}");
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the service the way SIGTERM would and returns how its run ended.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(anyhow::anyhow!("the service thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for InProcessService {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}
