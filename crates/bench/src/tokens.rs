//! Inputs for load tools that cannot ask the gateway themselves: purchase tokens signed with
//! the configured key (as `POST …/tokens` issues them), and a product loaded straight into
//! Redis for redis-benchmark.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use domain::{OrderToken, ProductId, PurchaseClaims, TokenSigner, UserId};
use secrecy::ExposeSecret;
use stock_cache::{LoadMode, LoadSpec, StockCache};

use crate::settings::Settings;

/// Long enough for any bench phase; the gateway checks only that it is in the future.
const TOKEN_TTL_MS: i64 = 3_600_000;

pub async fn sign(
    settings: &Settings,
    product: ProductId,
    first_user: u64,
    users: u64,
    out: &Path,
) -> anyhow::Result<()> {
    let keys = settings
        .tokens
        .keys
        .iter()
        .map(|(id, key)| (id.clone(), key.expose_secret().as_bytes().to_vec()))
        .collect();
    let signer = TokenSigner::new(settings.tokens.current_key_id.clone(), keys)
        .context("the purchase-token keys are invalid")?;
    let expires_at_ms = chrono_now_ms() + TOKEN_TTL_MS;
    // Tokens are for the product's current sale, as the gateway would issue them.
    let cache = StockCache::new(
        &settings.redis.url,
        1,
        &settings.redis.key_prefix,
        Duration::from_secs(10),
    )?;
    let sale = cache
        .sale_window(product)
        .await?
        .with_context(|| format!("product {product} is not loaded in Redis"))?
        .sale;
    let mut text = String::new();
    for user in first_user..first_user + users {
        let claims = PurchaseClaims {
            order_token: OrderToken::random(product),
            user_id: UserId(user),
            expires_at_ms,
            sale,
        };
        writeln!(text, "{user} {}", signer.issue(&claims))?;
    }
    std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(())
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub async fn load_product(
    settings: &Settings,
    prefix: &str,
    product: ProductId,
    stock: i64,
    per_user_limit: u32,
) -> anyhow::Result<()> {
    let cache = StockCache::new(&settings.redis.url, 1, prefix, Duration::from_secs(10))?;
    let spec = LoadSpec {
        initial_stock: stock,
        per_user_limit,
        starts_at_ms: 0,
        ends_at_ms: 0,
        sellable_stock: stock,
        mode: LoadMode::Fresh,
    };
    cache.load_product(product, &spec).await?;
    let keys = cache.keys(product);
    println!(
        "{} {} {} {} {}",
        keys.meta, keys.stock, keys.flow, keys.users, keys.tomb
    );
    Ok(())
}
