//! `seed-reconcile`: a finished sale of N units for one product — N committed flows in
//! Redis, N orders and N stock_flow rows in MySQL, both stocks at 0 — written as fast as the
//! servers take it (pipelined HSETs, multi-row INSERTs), so that the audit of a large,
//! consistent sale can be timed on its own.

use std::time::Duration;

use deadpool_redis::redis;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{OrderToken, ProductId};
use order_store::{Db, NewProduct};
use secrecy::ExposeSecret;
use stock_cache::{LoadMode, LoadSpec, StockCache};

use crate::settings::Settings;

/// Rows per INSERT / HSETs per pipeline: large enough to amortise round trips, small
/// enough to stay under max_allowed_packet.
const CHUNK: u64 = 5_000;

pub async fn seed_reconcile(
    settings: &Settings,
    product: ProductId,
    units: u64,
) -> anyhow::Result<()> {
    let url = settings.mysql.url.expose_secret();
    order_store::create_database(url).await?;
    order_store::migrate(url).await?;
    let db = Db::connect(url, 2)?;
    let initial = i64::try_from(units)?;
    let mut conn = AsyncMysqlConnection::establish(url).await?;
    for table in ["stock_flow", "orders"] {
        diesel::sql_query(format!("DELETE FROM {table} WHERE product_id = {product}"))
            .execute(&mut conn)
            .await?;
    }
    db.put_product(
        &NewProduct {
            id: product,
            name: "bench".into(),
            initial_stock: initial,
            per_user_limit: 1,
            starts_at: None,
            ends_at: None,
        },
        true,
    )
    .await?;
    diesel::sql_query(format!(
        "UPDATE product_stock SET stock = 0 WHERE product_id = {product}"
    ))
    .execute(&mut conn)
    .await?;

    let redis = &settings.redis;
    let cache = StockCache::new(&redis.url, 2, &redis.key_prefix, Duration::from_secs(30))?;
    let spec = LoadSpec {
        initial_stock: initial,
        per_user_limit: 1,
        starts_at_ms: 0,
        ends_at_ms: 0,
        sellable_stock: 0,
        mode: LoadMode::Fresh,
    };
    cache.load_product(product, &spec).await?;
    let flow_key = cache.keys(product).flow;
    let client = redis::Client::open(redis.url.as_str())?;
    let mut redis_conn = client.get_multiplexed_async_connection().await?;

    let reserved_at_ms = 1_700_000_000_000_i64;
    let mut start = 0;
    while start < units {
        let end = (start + CHUNK).min(units);
        let mut pipe = redis::pipe();
        let mut orders = Vec::with_capacity(CHUNK as usize);
        let mut stock_flows = Vec::with_capacity(CHUNK as usize);
        for i in start..end {
            let token = OrderToken::new(product, u128::from(i));
            let user = i + 1;
            let before = initial - i64::try_from(i)?;
            pipe.hset(
                &flow_key,
                token.to_string(),
                format!(
                    r#"{{"user_id":{user},"quantity":1,"stock_before":{before},"stock_after":{},"reserved_at_ms":{reserved_at_ms},"state":"committed"}}"#,
                    before - 1
                ),
            )
            .ignore();
            orders.push(format!(
                "('{token}',{user},{product},1,'confirmed',FROM_UNIXTIME({}))",
                reserved_at_ms / 1000
            ));
            stock_flows.push(format!("('{token}',{product},1,'SECKILL')"));
        }
        let () = pipe.query_async(&mut redis_conn).await?;
        diesel::sql_query(format!(
            "INSERT INTO orders (order_token,user_id,product_id,quantity,status,reserved_at) VALUES {}",
            orders.join(",")
        ))
        .execute(&mut conn)
        .await?;
        diesel::sql_query(format!(
            "INSERT INTO stock_flow (order_token,product_id,quantity,op_type) VALUES {}",
            stock_flows.join(",")
        ))
        .execute(&mut conn)
        .await?;
        start = end;
    }
    Ok(())
}
