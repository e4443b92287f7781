//! Brings the order database up to date: creates it if missing, then applies the pending
//! migrations under the migration lock. Safe to run from every replica at once.
//!
//! The DSN comes from `SECKILL_MYSQL__URL` (the same variable the services read).

use std::process::ExitCode;

use anyhow::Context as _;

const DEFAULT_URL: &str = "mysql://seckill:seckill@127.0.0.1:13306/seckill";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("seckill-migrate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<String> {
    let url = std::env::var("SECKILL_MYSQL__URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let (_, database) =
        order_store::split_database_url(&url).context("reading SECKILL_MYSQL__URL")?;
    let database = database.context("SECKILL_MYSQL__URL names no database")?;
    order_store::create_database(&url)
        .await
        .with_context(|| format!("creating database `{database}`"))?;
    let applied = order_store::migrate(&url)
        .await
        .with_context(|| format!("migrating database `{database}`"))?;
    Ok(if applied.is_empty() {
        format!("Database `{database}` is up to date.")
    } else {
        format!(
            "Database `{database}`: applied {} migration(s), now at {}.",
            applied.len(),
            applied.last().map(String::as_str).unwrap_or_default()
        )
    })
}
