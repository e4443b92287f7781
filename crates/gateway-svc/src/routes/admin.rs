//! The operator's product endpoints: define a sale (MySQL, then Redis) and look at it.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Datelike, Utc};
use order_store::{NewProduct, PutOutcome, StoreError};
use serde::{Deserialize, Serialize};
use stock_cache::{LoadMode, LoadSpec};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::identity::Admin;
use crate::openapi::{
    BadRequest, Conflict, NotFound, PayloadTooLarge, Unauthenticated, Unavailable,
};
use crate::routes::buyer::rfc3339_ms;
use crate::routes::{AppState, ProductPath, product_id, whole_number};

/// Largest stock one product may carry: far above any sale, far below overflow.
const MAX_STOCK: i64 = 1_000_000_000;

/// A sale: the product, its units and when it is open.
#[derive(Deserialize, ToSchema)]
pub struct PutProduct {
    /// 1 to 200 characters, not all whitespace (it is stored trimmed).
    // The pattern asks for one character outside Unicode's White_Space, which is what
    // `str::trim` removes: `\S` would differ by engine (ECMA counts U+FEFF as space, Python
    // U+001C..U+001F, Unicode neither).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    )]
    name: String,
    /// Units on sale from now on.
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    #[serde(deserialize_with = "whole_number")]
    stock: i64,
    /// Most units one buyer may hold.
    #[schema(format = "uint32", minimum = 1, maximum = 4_294_967_295_u32)]
    #[serde(deserialize_with = "whole_number")]
    per_user_limit: u32,
    /// Opening time (RFC 3339, years 1000 to 9999 in UTC); absent or null: open now.
    starts_at: Option<DateTime<Utc>>,
    /// Closing time (RFC 3339, years 1000 to 9999 in UTC), after `starts_at`; absent or
    /// null: never closes.
    ends_at: Option<DateTime<Utc>>,
    /// Restock a sale that has reserved units or orders: `stock` more units, everything
    /// reserved stays sold. Without it such a put is refused (409 `ORDERS_EXIST`).
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
        // MySQL's DATETIME holds these years only. Outside them the store refuses the row,
        // which was answered 503 "MySQL cannot be reached": it is the client's 400.
        let storable = |at: &DateTime<Utc>| (1000..=9999).contains(&at.year());
        if !self.starts_at.iter().all(storable) {
            return bad("starts_at must be in the years 1000 to 9999 (UTC)");
        }
        if !self.ends_at.iter().all(storable) {
            return bad("ends_at must be in the years 1000 to 9999 (UTC)");
        }
        if let (Some(starts), Some(ends)) = (self.starts_at, self.ends_at)
            && ends <= starts
        {
            return bad("ends_at must be after starts_at");
        }
        Ok(())
    }
}

/// The sale as loaded.
#[derive(Serialize, ToSchema)]
pub struct ProductView {
    #[schema(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    product_id: u64,
    name: String,
    /// Units the sale has had in all: `stock` plus everything already reserved.
    initial_stock: i64,
    /// Units on sale now.
    stock: i64,
    #[schema(format = "uint32", maximum = 4_294_967_295_u32)]
    per_user_limit: u32,
    /// Null: open since it was loaded.
    #[schema(format = DateTime)]
    starts_at: Option<String>,
    /// Null: never closes.
    #[schema(format = DateTime)]
    ends_at: Option<String>,
}

/// Define a sale (or restock one).
///
/// Writes MySQL, then loads Redis from what was written. 409 `ORDERS_EXIST` when the product
/// has reserved units or orders and `force` is not set; 503 when MySQL or Redis cannot be
/// reached.
#[utoipa::path(
    put,
    path = "/admin/v1/products/{product_id}",
    tag = "admin",
    params(ProductPath),
    request_body = PutProduct,
    security(("admin" = [])),
    responses(
        (status = 200, description = "The sale as loaded.", body = ProductView, links(
            ("IssueToken" = (
                operation_id = "issue_token",
                description = "A purchase token for the product.",
                parameters(("product_id" = "$response.body#/product_id")),
            )),
            ("GetProduct" = (
                operation_id = "get_product",
                description = "The sale seen from both stores.",
                parameters(("product_id" = "$response.body#/product_id")),
            )),
            ("ReloadProduct" = (
                operation_id = "reload_product",
                description = "Rebuild the product in Redis (409 while Redis has it).",
                parameters(("product_id" = "$response.body#/product_id")),
            )),
        )),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 503, response = Unavailable),
    )
)]
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
            // Input the store cannot hold (validate() should have caught it): the client's
            // fault, not an unreachable MySQL.
            StoreError::InvalidData(message) => ApiError::BadRequest(message),
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

/// A sale seen from both stores.
#[derive(Serialize, ToSchema)]
pub struct ProductState {
    #[schema(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    product_id: u64,
    initial_stock: i64,
    /// Units left in Redis; null when Redis has not loaded the product.
    redis_stock: Option<i64>,
    /// Units left in MySQL; null when it has no stock row.
    mysql_stock: Option<i64>,
    /// Reservations recorded in Redis.
    #[schema(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    flows: u64,
    /// Order rows in MySQL.
    orders: i64,
    /// This gateway's sold-out flag.
    sold_out: bool,
}

/// Look at a sale.
///
/// Its stock in Redis and in MySQL, its reservations and orders. 404 when MySQL does not
/// know the product.
#[utoipa::path(
    get,
    path = "/admin/v1/products/{product_id}",
    tag = "admin",
    params(ProductPath),
    security(("admin" = [])),
    responses(
        (status = 200, description = "The sale.", body = ProductState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, response = NotFound),
        (status = 503, response = Unavailable),
    )
)]
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
    let (mysql_stock, orders) = state
        .db
        .stock_and_order_count(product)
        .await
        .map_err(mysql)?;
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
        orders,
        sold_out: state.sold_out.is_sold_out(product),
    }))
}
