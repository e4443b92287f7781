//! The operator's product endpoints: define a sale (MySQL, then Redis) and look at it.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use order_store::{NewProduct, PutOutcome, StoreError};
use serde::{Deserialize, Serialize};
use stock_cache::{LoadMode, LoadSpec};

use crate::error::ApiError;
use crate::identity::Admin;
use crate::routes::buyer::rfc3339_ms;
use crate::routes::{AppState, product_id};

/// Largest stock one product may carry: far above any sale, far below overflow.
const MAX_STOCK: i64 = 1_000_000_000;

#[derive(Deserialize)]
pub struct PutProduct {
    name: String,
    stock: i64,
    per_user_limit: u32,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    #[serde(default)]
    force: bool,
}

impl PutProduct {
    fn validate(&self) -> Result<(), ApiError> {
        let bad = |m: &str| Err(ApiError::BadRequest(m.to_owned()));
        if self.name.trim().is_empty() || self.name.chars().count() > 200 {
            return bad("name must be 1-200 characters");
        }
        if !(0..=MAX_STOCK).contains(&self.stock) {
            return bad("stock must be between 0 and 1000000000");
        }
        if self.per_user_limit == 0 {
            return bad("per_user_limit must be at least 1");
        }
        if let (Some(starts), Some(ends)) = (self.starts_at, self.ends_at)
            && ends <= starts
        {
            return bad("ends_at must be after starts_at");
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct ProductView {
    product_id: u64,
    name: String,
    initial_stock: i64,
    stock: i64,
    per_user_limit: u32,
    starts_at: Option<String>,
    ends_at: Option<String>,
}

pub async fn put_product(
    state: web::Data<AppState>,
    path: web::Path<String>,
    _admin: Admin,
    body: web::Json<PutProduct>,
) -> Result<HttpResponse, ApiError> {
    let product = product_id(&path)?;
    body.validate()?;
    let mysql = |e| ApiError::unavailable("MySQL cannot be reached", e);

    // Units Redis has reserved (Σ flows = initial − stock). Any at all means a sale is
    // running: a fresh load would forget flows whose orders are still on their way.
    let reserved = reserved_units(&state, product).await?;
    if reserved > 0 && !body.force {
        return Err(ApiError::OrdersExist);
    }
    // `force` restocks: `stock` more units from now on, and everything reserved stays
    // sold. Reserved units not yet ordered will still deduct MySQL stock when their order
    // arrives, so MySQL gets them on top.
    let ordered = state.db.ordered_units(product).await.map_err(mysql)?;
    let in_flight = (reserved - ordered).max(0);
    let definition = NewProduct {
        id: product,
        name: body.name.trim().to_owned(),
        initial_stock: body.stock + in_flight,
        per_user_limit: body.per_user_limit,
        starts_at: body.starts_at,
        ends_at: body.ends_at,
    };
    // MySQL is the truth: write it first, then load Redis from what was written.
    let outcome = state
        .db
        .put_product(&definition, body.force)
        .await
        .map_err(|error| match error {
            StoreError::OrdersExist { .. } => ApiError::OrdersExist,
            other => mysql(other),
        })?;
    let initial_stock = match outcome {
        PutOutcome::Restocked { initial_stock, .. } => initial_stock,
        PutOutcome::Created | PutOutcome::Replaced => definition.initial_stock,
    };
    let mode = if reserved > 0 || matches!(outcome, PutOutcome::Restocked { .. }) {
        LoadMode::Restock
    } else {
        LoadMode::Fresh
    };
    let spec = LoadSpec {
        initial_stock,
        per_user_limit: body.per_user_limit,
        starts_at_ms: body.starts_at.map_or(0, |t| t.timestamp_millis()),
        ends_at_ms: body.ends_at.map_or(0, |t| t.timestamp_millis()),
        sellable_stock: body.stock,
        mode,
    };
    state
        .cache
        .load_product(product, &spec)
        .await
        .map_err(|e| ApiError::unavailable("Redis cannot be reached", e))?;
    state.sold_out.clear(product);
    platform::ops::record_stock(product.get(), "redis", body.stock);
    tracing::info!(product_id = %product, initial_stock, stock = body.stock, ?mode, "Product loaded for sale.");

    Ok(HttpResponse::Ok().json(ProductView {
        product_id: product.get(),
        name: definition.name,
        initial_stock,
        stock: body.stock,
        per_user_limit: body.per_user_limit,
        starts_at: rfc3339_ms(spec.starts_at_ms),
        ends_at: rfc3339_ms(spec.ends_at_ms),
    }))
}

/// Σ flows, as Redis' `initial − stock`; 0 when the product is not loaded.
async fn reserved_units(state: &AppState, product: domain::ProductId) -> Result<i64, ApiError> {
    let redis = |e| ApiError::unavailable("Redis cannot be reached", e);
    let meta = state.cache.meta(product).await.map_err(redis)?;
    let stock = state.cache.stock(product).await.map_err(redis)?;
    Ok(match (meta, stock) {
        (Some(meta), Some(stock)) => (meta.initial_stock - stock).max(0),
        _ => 0,
    })
}

#[derive(Serialize)]
struct ProductState {
    product_id: u64,
    initial_stock: i64,
    redis_stock: Option<i64>,
    mysql_stock: Option<i64>,
    flows: u64,
    orders: i64,
    sold_out: bool,
}

pub async fn get_product(
    state: web::Data<AppState>,
    path: web::Path<String>,
    _admin: Admin,
) -> Result<HttpResponse, ApiError> {
    let product = product_id(&path)?;
    let mysql = |e| ApiError::unavailable("MySQL cannot be reached", e);
    let redis = |e| ApiError::unavailable("Redis cannot be reached", e);
    let row = state
        .db
        .product(product)
        .await
        .map_err(mysql)?
        .ok_or(ApiError::NotFound("product"))?;
    let redis_stock = state.cache.stock(product).await.map_err(redis)?;
    let mysql_stock = state.db.stock(product).await.map_err(mysql)?;
    // An operator's look refreshes the dashboard's stock too.
    if let Some(units) = redis_stock {
        platform::ops::record_stock(product.get(), "redis", units);
    }
    if let Some(units) = mysql_stock {
        platform::ops::record_stock(product.get(), "mysql", units);
    }
    Ok(HttpResponse::Ok().json(ProductState {
        product_id: product.get(),
        initial_stock: row.initial_stock,
        redis_stock,
        mysql_stock,
        flows: state.cache.flow_count(product).await.map_err(redis)?,
        orders: state.db.order_count(product).await.map_err(mysql)?,
        sold_out: state.sold_out.is_sold_out(product),
    }))
}
