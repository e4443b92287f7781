//! A small Tokio runtime a service owns beside its main one.
//!
//! The RocketMQ client calls the services' listeners (the gateway's local transaction, the
//! consumer's batch writer) synchronously on its own threads; they run their async Redis
//! and MySQL work here with `Handle::block_on`. The runtime is always released with
//! `shutdown_background`: `build` runs in an async context, where dropping a Tokio runtime
//! panics — a failure after it exists would otherwise turn into that panic.

use tokio::runtime::{Builder, Handle, Runtime};

pub struct SideRuntime(Option<Runtime>);

impl std::fmt::Debug for SideRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideRuntime").finish_non_exhaustive()
    }
}

impl SideRuntime {
    pub fn new(thread_name: &str, worker_threads: usize) -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(worker_threads)
            .thread_name(thread_name)
            .enable_all()
            .build()?;
        Ok(Self(Some(runtime)))
    }

    pub fn handle(&self) -> Handle {
        self.0
            .as_ref()
            .expect("the runtime lives until drop")
            .handle()
            .clone()
    }
}

impl Drop for SideRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
