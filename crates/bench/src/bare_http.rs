//! `bare-http`: the least an actix-web server can do for a purchase request — route it, read
//! its body and answer the gateway's sold-out refusal, with no parsing, no middleware and no
//! state. The gateway's rejections after sell-out are measured against it with the same
//! load tool, so the ratio is what the gateway's own work (identity, rate limits, token
//! check, the flag, its metrics and span middleware) costs over actix-web itself.

use actix_web::{App, HttpResponse, HttpServer, web};

/// The gateway's 409 body for SOLD_OUT, byte for byte.
const SOLD_OUT: &str = r#"{"error":{"code":"SOLD_OUT","message":"sold out"}}"#;

/// Takes the body as bytes, unparsed: a handler that leaves the payload unread makes
/// actix-web close the connection after the answer, which would measure reconnects.
async fn sold_out(_body: web::Bytes) -> HttpResponse {
    HttpResponse::Conflict()
        .content_type("application/json")
        .body(SOLD_OUT)
}

pub async fn serve(listen: &str, workers: Option<usize>) -> anyhow::Result<()> {
    let mut server = HttpServer::new(|| {
        App::new().route(
            "/api/v1/products/{product_id}/purchase",
            web::post().to(sold_out),
        )
    })
    .backlog(4096)
    .max_connection_rate(4096);
    if let Some(workers) = workers {
        server = server.workers(workers);
    }
    eprintln!("bare-http: listening on {listen}");
    server.bind(listen)?.run().await?;
    Ok(())
}
