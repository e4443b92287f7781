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
    let definition = NewProduct {
        id: product,
        name: body.name.trim().to_owned(),
        initial_stock: body.stock,
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
            other => ApiError::unavailable("MySQL cannot be reached", other),
        })?;

    let (initial_stock, sellable_stock, mode) = match outcome {
        PutOutcome::Created | PutOutcome::Replaced => (body.stock, body.stock, LoadMode::Fresh),
        PutOutcome::Restocked { initial_stock, .. } => {
            // Units reserved in Redis but not yet ordered in MySQL are still on their way:
            // they come out of the new stock, or they would be sold twice.
            let in_flight = in_flight_units(&state, product).await?;
            (initial_stock, body.stock - in_flight, LoadMode::Restock)
        }
    };
    let spec = LoadSpec {
        initial_stock,
        per_user_limit: body.per_user_limit,
        starts_at_ms: body.starts_at.map_or(0, |t| t.timestamp_millis()),
        ends_at_ms: body.ends_at.map_or(0, |t| t.timestamp_millis()),
        sellable_stock: sellable_stock.max(0),
        mode,
    };
    state
        .cache
        .load_product(product, &spec)
        .await
        .map_err(|e| ApiError::unavailable("Redis cannot be reached", e))?;
    state.sold_out.clear(product);
    tracing::info!(product_id = %product, initial_stock, sellable_stock, ?mode, "Product loaded for sale.");

    Ok(HttpResponse::Ok().json(ProductView {
        product_id: product.get(),
        name: definition.name,
        initial_stock,
        stock: spec.sellable_stock,
        per_user_limit: body.per_user_limit,
        starts_at: rfc3339_ms(spec.starts_at_ms),
        ends_at: rfc3339_ms(spec.ends_at_ms),
    }))
}

/// Σ flows − Σ orders, from Redis' `initial − stock` (every reserved unit) and MySQL.
async fn in_flight_units(state: &AppState, product: domain::ProductId) -> Result<i64, ApiError> {
    let redis = |e| ApiError::unavailable("Redis cannot be reached", e);
    let (Some(meta), Some(stock)) = (
        state.cache.meta(product).await.map_err(redis)?,
        state.cache.stock(product).await.map_err(redis)?,
    ) else {
        return Ok(0);
    };
    let ordered = state
        .db
        .ordered_units(product)
        .await
        .map_err(|e| ApiError::unavailable("MySQL cannot be reached", e))?;
    Ok((meta.initial_stock - stock - ordered).max(0))
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
    Ok(HttpResponse::Ok().json(ProductState {
        product_id: product.get(),
        initial_stock: row.initial_stock,
        redis_stock: state.cache.stock(product).await.map_err(redis)?,
        mysql_stock: state.db.stock(product).await.map_err(mysql)?,
        flows: state.cache.flow_count(product).await.map_err(redis)?,
        orders: state.db.order_count(product).await.map_err(mysql)?,
        sold_out: state.sold_out.is_sold_out(product),
    }))
}
