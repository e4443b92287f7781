//! Rebuilding a product Redis lost (restarted without its data, or failed over to an empty
//! replica) from MySQL's truth.
//!
//! While Redis has no meta for a product, pre_deduct answers "not loaded" and the gateway
//! refuses to sell it (503): an empty state is never read as "nothing sold". The reload:
//!
//! 1. waits for the order consumers to empty their backlog: an order still queued took its
//!    unit from the old Redis stock but is not in MySQL yet, and must be there before MySQL
//!    can say what is left (nothing new for this product joins the queue meanwhile: it is
//!    not on sale, and check-backs answer "unknown" instead of committing);
//! 2. writes back a committed flow, the buyer's units and the confirmed result of every
//!    order MySQL holds (used tokens stay used, per-user limits hold, status polling works);
//! 3. loads meta and stock last, stock = MySQL's `product_stock`, so Redis stock + Σ flows =
//!    initial again, and the product is on sale.
//!
//! One reload per product at a time, under a MySQL lease held in the gateway's own name
//! (host, PID and a random part: replicas in containers all have PID 1). Steps 2 and 3 are
//! refused by Redis itself once the product has meta again, so even a reload that outlived
//! its lease cannot rebuild over a sale another one has put back on sale.

use actix_web::{HttpResponse, web};
use domain::ProductId;
use order_store::ProductRow;
use serde::Serialize;
use stock_cache::{LoadMode, LoadSpec, OrderToRestore, RestoredOrder};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::identity::Admin;
use crate::responses::{BadRequest, Conflict, NotFound, Unauthenticated, Unavailable};
use crate::routes::{AppState, ProductPath, product_id, rfc3339_ms};

/// Orders read from MySQL and written to Redis per round trip.
const PAGE: u32 = 1000;
/// Long enough for the largest rebuild; the lease is released as soon as it is done.
const LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(600);
const DRAIN_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// The product as rebuilt in Redis.
#[derive(Serialize, ToSchema)]
pub struct Reloaded {
    #[schema(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    product_id: u64,
    initial_stock: i64,
    /// Units on sale again: MySQL's stock.
    stock: i64,
    /// Orders written back to Redis from MySQL.
    #[schema(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    orders_restored: u64,
    units_restored: i64,
    #[schema(format = "uint32", maximum = 4_294_967_295_u32)]
    per_user_limit: u32,
    #[schema(format = DateTime)]
    starts_at: Option<String>,
    #[schema(format = DateTime)]
    ends_at: Option<String>,
}

/// Redis refuses to rebuild a product that is on sale again (another reload, or a PUT,
/// loaded it meanwhile): 409 `PRODUCT_LOADED`, as when the reload began with it loaded.
fn loaded_or_unavailable(error: stock_cache::CacheError) -> ApiError {
    match error {
        stock_cache::CacheError::AlreadyLoaded => ApiError::ProductLoaded,
        other => other.into(),
    }
}

/// Rebuild a product Redis lost.
///
/// From MySQL's truth, once the order consumers have written every queued order. 404 when
/// MySQL does not know the product; 409 `PRODUCT_LOADED` when Redis has it (nothing to
/// rebuild) or `ORDERS_IN_FLIGHT` when the backlog did not drain in
/// `gateway.reload_drain_secs`; 503 when MySQL, Redis or the broker cannot be reached, or
/// another reload of the product is running.
#[utoipa::path(
    post,
    path = "/admin/v1/products/{product_id}/reload",
    tag = "admin",
    params(ProductPath),
    security(("admin" = [])),
    responses(
        (status = 200, description = "Rebuilt.", body = Reloaded),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 503, response = Unavailable),
    )
)]
pub async fn reload_product(
    state: web::Data<AppState>,
    path: web::Path<String>,
    _admin: Admin,
) -> Result<HttpResponse, ApiError> {
    let product = product_id(&path)?;
    let row = state
        .db
        .product(product)
        .await?
        .ok_or(ApiError::NotFound("product"))?;
    if state.cache.meta(product).await?.is_some() {
        return Err(ApiError::ProductLoaded);
    }
    let lease = format!("reload:{product}");
    let holder = &*state.lease_holder;
    if !state.db.try_lease(&lease, holder, LEASE_TTL).await? {
        return Err(ApiError::Unavailable {
            message: "another reload of this product is running",
            cause: None,
        });
    }
    let rebuilt = rebuild(&state, product, &row).await;
    state.sale_windows.forget(product).await;
    if let Err(error) = state.db.release_lease(&lease, holder).await {
        tracing::warn!(product_id = %product, error = ?error, "Cannot release the reload lease; it expires by itself.");
    }
    Ok(HttpResponse::Ok().json(rebuilt?))
}

async fn rebuild(
    state: &AppState,
    product: ProductId,
    row: &ProductRow,
) -> Result<Reloaded, ApiError> {
    wait_for_empty_backlog(state).await?;
    // A PUT may have loaded the product while this waited: then there is nothing to rebuild.
    if state.cache.meta(product).await?.is_some() {
        return Err(ApiError::ProductLoaded);
    }

    state
        .cache
        .forget_sale_state(product)
        .await
        .map_err(loaded_or_unavailable)?;
    let (mut orders_restored, mut units_restored, mut after_id) = (0u64, 0i64, 0u64);
    loop {
        let page = state.db.orders_page(product, after_id, PAGE).await?;
        let Some(last) = page.last() else { break };
        after_id = last.id;
        // Every order goes back with its status: an open or paid one holds its units again,
        // a cancelled or expired one only its tomb (its units are in the stock below).
        let orders: Vec<OrderToRestore> = page
            .iter()
            .map(|order| OrderToRestore {
                order: RestoredOrder {
                    order_token: order.order_token.clone(),
                    user_id: order.user_id,
                    quantity: order.quantity,
                    reserved_at_ms: order.reserved_at_ms,
                },
                status: order.status,
                pay_by_ms: order.pay_by_ms,
            })
            .collect();
        state.cache.restore_order_states(product, &orders).await?;
        let held: Vec<_> = orders
            .iter()
            .filter(|o| !o.status.returned_units())
            .collect();
        orders_restored += held.len() as u64;
        units_restored += held
            .iter()
            .map(|o| i64::from(o.order.quantity))
            .sum::<i64>();
    }

    let stock = state.db.stock(product).await?.unwrap_or(0).max(0);
    let spec = LoadSpec {
        initial_stock: row.initial_stock,
        per_user_limit: row.per_user_limit,
        starts_at_ms: row.starts_at.map_or(0, |t| t.timestamp_millis()),
        ends_at_ms: row.ends_at.map_or(0, |t| t.timestamp_millis()),
        sellable_stock: stock,
        // Keeps the flows, buyers and results just written back.
        mode: LoadMode::Rebuild,
    };
    state
        .cache
        .load_product(product, &spec)
        .await
        .map_err(loaded_or_unavailable)?;
    state.sold_out.clear(product);
    platform::ops::record_stock(product.get(), "redis", stock);
    tracing::warn!(
        product_id = %product,
        orders_restored,
        units_restored,
        stock,
        "Product rebuilt in Redis from MySQL."
    );
    Ok(Reloaded {
        product_id: product.get(),
        initial_stock: row.initial_stock,
        stock,
        orders_restored,
        units_restored,
        per_user_limit: row.per_user_limit,
        starts_at: rfc3339_ms(spec.starts_at_ms),
        ends_at: rfc3339_ms(spec.ends_at_ms),
    })
}

/// Polls the broker until the order consumers have written every queued order, for up to
/// the configured drain time; 409 ORDERS_IN_FLIGHT after it.
async fn wait_for_empty_backlog(state: &AppState) -> Result<(), ApiError> {
    let deadline = tokio::time::Instant::now() + state.reload_drain;
    loop {
        let pending = state.backlog.pending().await?;
        if pending == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::OrdersInFlight(pending));
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}
