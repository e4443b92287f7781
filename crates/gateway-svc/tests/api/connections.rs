//! How long the gateway keeps an idle connection: `gateway.keep_alive_secs`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::spawn_app_with;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n";

/// Sends a health check on `stream` and reads its whole answer (it is small and ends the
/// read: the gateway writes it in one go).
async fn health_check(stream: &mut TcpStream) -> String {
    stream.write_all(HEALTHZ).await.unwrap();
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test]
async fn an_idle_connection_is_kept_for_the_keep_alive_and_closed_after_it() {
    let app = spawn_app_with(&[("SECKILL_GATEWAY__KEEP_ALIVE_SECS", "1")]).await;
    let mut stream = TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .unwrap();

    assert!(health_check(&mut stream).await.starts_with("HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        health_check(&mut stream).await.starts_with("HTTP/1.1 200"),
        "idle for less than the keep-alive, the connection still answers"
    );

    // 1.5 s past the keep-alive the connection is gone, so the read ends within 1 s (with a
    // keep-alive of 4 s or more it would still be open then, and the read would time out).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(1), stream.read_to_end(&mut rest))
        .await
        .expect("the gateway has closed the connection");
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "idle past the keep-alive, the gateway closed the connection (read {read:?}, {} bytes)",
        rest.len()
    );
}
