//! seckill-bench: the measuring tools of `make bench` (deploy/bench/run.sh), one subcommand
//! each. Every subcommand that measures prints one JSON object per measurement on stdout,
//! which run.sh collects; progress and notes go to stderr.
//!
//! - [`seed`]: `seed-reconcile`, a large consistent sale for the reconcile audit.
//! - [`bare_http`]: `bare-http`, a trivial actix-web handler: the ceiling the gateway's
//!   sold-out rejections are compared with, under the same load tool.
//! - [`tokens`]: `sign-tokens` (purchase tokens for wrk, signed with the configured key) and
//!   `load-product` (a product straight into Redis, for redis-benchmark).
//! - [`sends`]: `sends`, transactional against plain sends of one `OrderPublisher`.
//! - [`orders`]: `prepare-product`, `publish-orders`, `write-orders` (raw batched SQL and one
//!   transaction per order) and `drain` (order-consumer-svc draining a queued backlog).
//! - [`conns`]: `conns`, a process's RSS with N keep-alive connections open to it.
//! - [`streams`]: `streams`, a gateway holding N order-event streams: RSS, how fast a
//!   cancel reaches them, and how fast the returned units sell again after a sell-out.
//! - [`cpu`]: CPU time of processes and of the machine over a measured window.

mod bare_http;
mod conns;
mod cpu;
mod orders;
mod seed;
mod sends;
mod settings;
mod streams;
mod tokens;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use domain::ProductId;

use crate::settings::Settings;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A sold-out sale of `--flows` units of `--product`, consistent on both sides.
    SeedReconcile {
        #[arg(long, default_value_t = 1_000_000)]
        flows: u64,
        #[arg(long, default_value_t = 900_000_001)]
        product: u64,
    },
    /// Serves a trivial handler on POST /api/v1/products/{id}/purchase (409 SOLD_OUT, the
    /// gateway's body) until SIGTERM / Ctrl-C.
    BareHttp {
        #[arg(long, default_value = "127.0.0.1:18090")]
        listen: String,
        /// actix-web workers; default: actix's own (one per core), as the gateway.
        #[arg(long)]
        workers: Option<usize>,
    },
    /// Writes `--users` lines `<user id> <purchase token>` for `--product`, signed with the
    /// configured current key (what POST …/tokens would have issued).
    SignTokens {
        #[arg(long)]
        product: u64,
        #[arg(long, default_value_t = 1000)]
        users: u64,
        #[arg(long, default_value_t = 1)]
        first_user: u64,
        #[arg(long)]
        out: PathBuf,
    },
    /// Loads a product straight into Redis (load_product.lua, fresh) under `--prefix` and
    /// prints the five KEYS of pre_deduct.lua on one line.
    LoadProduct {
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        product: u64,
        #[arg(long)]
        stock: i64,
        #[arg(long, default_value_t = 1)]
        per_user_limit: u32,
    },
    /// Transactional against plain sends of one OrderPublisher (a LocalTransaction that
    /// commits at once): `--rounds` rounds, each concurrency in turn, tx then plain.
    Sends(sends::SendsArgs),
    /// A fresh product with `--stock` units in MySQL (and, with `--fresh`, the database
    /// dropped and migrated anew first).
    PrepareProduct {
        #[arg(long)]
        product: u64,
        #[arg(long, default_value_t = 10_000_000)]
        stock: i64,
        #[arg(long)]
        fresh: bool,
    },
    /// Publishes `--orders` plain order messages for `--product` (the configured topic).
    PublishOrders {
        #[arg(long)]
        product: u64,
        #[arg(long, default_value_t = 100_000)]
        orders: u64,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Orders per message; above 1 they go as transactional messages, as the gateway
        /// sends winners that queued together.
        #[arg(long, default_value_t = 1)]
        orders_per_message: u64,
    },
    /// Writes `--orders` orders with Db::write_orders from `--tasks` tasks: batches of
    /// `--batch` (the consumer's batch size), or one transaction per order (`--batch 1`).
    WriteOrders {
        #[arg(long)]
        product: u64,
        #[arg(long, default_value_t = 100_000)]
        orders: u64,
        #[arg(long, default_value_t = 64)]
        batch: usize,
        #[arg(long, default_value_t = 4)]
        tasks: usize,
        /// Processes whose CPU use over the writes is reported (`mariadb=<pid>`).
        #[arg(long, value_parser = cpu::parse_watch)]
        watch: Vec<(String, u32)>,
    },
    /// Starts `--consumer` (order-consumer-svc, configured by the environment) and times it
    /// until MySQL holds `--orders` orders of `--product`; then stops it.
    Drain {
        #[arg(long)]
        consumer: PathBuf,
        #[arg(long)]
        product: u64,
        #[arg(long, default_value_t = 100_000)]
        orders: i64,
        /// Where the consumer's pid is written, for a profiler to attach.
        #[arg(long)]
        pid_file: Option<PathBuf>,
        #[arg(long)]
        log: PathBuf,
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        /// Processes whose CPU use over the drain is reported (`mariadb=<pid>`), beside the
        /// consumer's and the machine's.
        #[arg(long, value_parser = cpu::parse_watch)]
        watch: Vec<(String, u32)>,
    },
    /// Runs a command (after `--`) and writes to `--out` how many cores the machine and the
    /// `--watch`ed processes kept busy meanwhile (the command's own under `self`).
    Cpu {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, value_parser = cpu::parse_watch)]
        watch: Vec<(String, u32)>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Opens `--count` keep-alive connections to `--addr` (one GET /healthz on each) and
    /// reports the RSS of `--pid` before and while they are open.
    Conns {
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: String,
        #[arg(long, default_value_t = 1000)]
        count: usize,
        #[arg(long)]
        pid: u32,
    },
    /// Sells `--orders` units of `--product` (a new id: it is put on sale here), opens
    /// `--count` event streams over the orders on the gateway at `--addr` (process `--pid`),
    /// then cancels every order; reports the RSS, each stream's delay and the resale.
    Streams {
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: String,
        #[arg(long, env = "SECKILL_ADMIN__TOKEN", default_value = "dev-admin-token")]
        admin_token: String,
        #[arg(long)]
        pid: u32,
        #[arg(long)]
        product: u64,
        #[arg(long, default_value_t = 100)]
        orders: usize,
        #[arg(long, default_value_t = 5000)]
        count: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Cpu {
            out,
            watch,
            command,
        } => return cpu::wrap(&out, &watch, &command).await,
        Command::SeedReconcile { flows, product } => {
            let settings = Settings::load().context("settings")?;
            let started = Instant::now();
            seed::seed_reconcile(&settings, ProductId(product), flows).await?;
            println!(
                "seeded product {product}: {flows} flows, orders and stock flows in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Command::BareHttp { listen, workers } => bare_http::serve(&listen, workers).await,
        Command::SignTokens {
            product,
            users,
            first_user,
            out,
        } => {
            let settings = Settings::load().context("settings")?;
            tokens::sign(&settings, ProductId(product), first_user, users, &out).await
        }
        Command::LoadProduct {
            prefix,
            product,
            stock,
            per_user_limit,
        } => {
            let settings = Settings::load().context("settings")?;
            tokens::load_product(
                &settings,
                &prefix,
                ProductId(product),
                stock,
                per_user_limit,
            )
            .await
        }
        Command::Sends(args) => {
            let settings = Settings::load().context("settings")?;
            sends::run(&settings, &args).await
        }
        Command::PrepareProduct {
            product,
            stock,
            fresh,
        } => {
            let settings = Settings::load().context("settings")?;
            orders::prepare_product(&settings, ProductId(product), stock, fresh).await
        }
        Command::PublishOrders {
            product,
            orders: count,
            concurrency,
            orders_per_message,
        } => {
            let settings = Settings::load().context("settings")?;
            orders::publish(
                &settings,
                ProductId(product),
                count,
                concurrency,
                orders_per_message,
            )
            .await
        }
        Command::WriteOrders {
            product,
            orders: count,
            batch,
            tasks,
            watch,
        } => {
            let settings = Settings::load().context("settings")?;
            orders::write(&settings, ProductId(product), count, batch, tasks, &watch).await
        }
        Command::Drain {
            consumer,
            product,
            orders: count,
            pid_file,
            log,
            timeout_secs,
            watch,
        } => {
            let settings = Settings::load().context("settings")?;
            let watch = orders::DrainWatch {
                consumer,
                product: ProductId(product),
                orders: count,
                pid_file,
                log,
                timeout: std::time::Duration::from_secs(timeout_secs),
                watch,
            };
            orders::drain(&settings, &watch).await
        }
        Command::Conns { addr, count, pid } => conns::run(&addr, count, pid).await,
        Command::Streams {
            addr,
            admin_token,
            pid,
            product,
            orders,
            count,
        } => {
            streams::run(&streams::StreamsArgs {
                addr: &addr,
                admin_token: &admin_token,
                pid,
                product,
                orders,
                count,
            })
            .await
        }
    }?;
    Ok(ExitCode::SUCCESS)
}
