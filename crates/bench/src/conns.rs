//! `conns`: the resident memory of a server holding N open keep-alive connections. Each
//! connection sends one `GET /healthz` and reads the answer, so the server has accepted it
//! and set up its per-connection state; while all are open the server's VmRSS is read, then
//! every connection asks once more to show it was still open when measured.

use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// At most this many connects in flight: the server's accept backlog is 4096, but a burst
/// of SYNs beyond the kernel's own backlog would only measure retransmits.
pub(crate) const CONNECT_BATCH: usize = 200;

pub async fn run(addr: &str, count: usize, pid: u32) -> anyhow::Result<()> {
    let before = memory(pid)?;
    let started = Instant::now();
    let mut streams = Vec::with_capacity(count);
    while streams.len() < count {
        let mut batch = JoinSet::new();
        for _ in 0..CONNECT_BATCH.min(count - streams.len()) {
            let addr = addr.to_owned();
            batch.spawn(async move {
                let mut stream = TcpStream::connect(&addr).await?;
                healthz(&mut stream).await?;
                anyhow::Ok(stream)
            });
        }
        while let Some(stream) = batch.join_next().await {
            streams.push(stream.context("a connection task panicked")??);
        }
    }
    let opened_ms = started.elapsed().as_millis();
    let open = memory(pid)?;
    let sockets = socket_count(pid);
    let mut again = JoinSet::new();
    for mut stream in streams {
        again.spawn(async move { healthz(&mut stream).await.map(|()| stream) });
    }
    let mut still_open = Vec::with_capacity(count);
    while let Some(result) = again.join_next().await {
        if let Ok(Ok(stream)) = result {
            still_open.push(stream);
        }
    }
    let after = memory(pid)?;
    println!(
        "{}",
        json!({
            "connections": count,
            "opened_ms": opened_ms,
            "still_open_after_measure": still_open.len(),
            "server_sockets": sockets,
            "rss_before_kib": before.rss_kib,
            "rss_open_kib": open.rss_kib,
            "rss_after_second_request_kib": after.rss_kib,
            "hwm_kib": after.hwm_kib,
            "threads": after.threads,
        })
    );
    Ok(())
}

async fn healthz(stream: &mut TcpStream) -> anyhow::Result<()> {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: keep-alive\r\n\r\n")
        .await?;
    let mut seen = Vec::with_capacity(512);
    let mut buf = [0_u8; 512];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        seen.extend_from_slice(&buf[..n]);
        if let Some(end) = find(&seen, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return Ok(());
            }
        }
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub(crate) struct Memory {
    pub(crate) rss_kib: u64,
    pub(crate) hwm_kib: u64,
    pub(crate) threads: u64,
}

pub(crate) fn memory(pid: u32) -> anyhow::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
        threads: field("Threads:"),
    })
}

/// Sockets the process holds (its listeners and pools included).
pub(crate) fn socket_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| {
        dir.filter_map(Result::ok)
            .filter(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
            })
            .count()
    })
}
