//! The operator's product endpoints: define a sale (MySQL, then Redis) and look at it.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Datelike, Utc};
use domain::ProductId;
use order_store::{NewProduct, PutError, PutOutcome, StoreError};
use serde::{Deserialize, Serialize};
use stock_cache::{CacheError, LoadMode, LoadSpec, RestockOutcome, SaleTerms, StockCache};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::identity::Admin;
use crate::responses::{
    BadRequest, Conflict, NotFound, PayloadTooLarge, Unauthenticated, Unavailable,
};
use crate::routes::{AppState, ProductPath, product_id, rfc3339_ms, whole_number};

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
    /// Units the sale has in all, sold or not (its initial stock). A restock of a running
    /// sale moves what is on sale by the difference to the last value.
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
    /// The price of one unit, in cents; a payment must be price × quantity. Absent: 0.
    #[schema(format = "uint64", minimum = 0)]
    #[serde(default, deserialize_with = "whole_number")]
    price_cents: u64,
    /// Restock a sale that has reserved units or orders: its initial stock becomes `stock`,
    /// and what is on sale moves by the same amount in one step, everything reserved staying
    /// sold; fewer units than are sold already is refused (409 `STOCK_BELOW_SOLD`). Without
    /// it such a put is refused (409 `ORDERS_EXIST`).
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
    #[schema(format = "uint64", minimum = 0)]
    price_cents: u64,
}

/// Define a sale (or restock one).
///
/// Writes MySQL and loads Redis in one step: MySQL's transaction commits only once Redis
/// took the change. 409 `ORDERS_EXIST` when the product has reserved units or orders and
/// `force` is not set; 409 `STOCK_BELOW_SOLD` when `force` asks for fewer units in all
/// than are sold already; 503 when MySQL or Redis cannot be reached, or when a restock
/// finds the product lost by Redis (reload it first).
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
    let definition = NewProduct {
        id: product,
        name: body.name.trim().to_owned(),
        initial_stock: body.stock,
        per_user_limit: body.per_user_limit,
        starts_at: body.starts_at,
        ends_at: body.ends_at,
    };
    let terms = SaleTerms {
        initial_stock: body.stock,
        per_user_limit: body.per_user_limit,
        starts_at_ms: body.starts_at.map_or(0, |t| t.timestamp_millis()),
        ends_at_ms: body.ends_at.map_or(0, |t| t.timestamp_millis()),
    };
    let (cache, force) = (&state.cache, body.force);
    let put = state
        .db
        .put_priced_product_and(&definition, body.price_cents, force, |mysql| {
            load_into_redis(cache, product, terms, force, mysql)
        })
        .await;
    // Whatever came of it, Redis may hold a new window (or a new sale) now.
    state.sale_windows.forget(product).await;
    let loaded = match put {
        Ok((_, Loaded::Known(loaded))) => loaded,
        Ok((_, Loaded::FateUnknown(cause))) => {
            return Err(ApiError::unavailable(
                "Redis did not answer, so the PUT may be half applied; send it again",
                cause,
            ));
        }
        Err(error) => return Err(put_failed(&state, product, &terms, error).await),
    };
    state.sold_out.clear(product);
    platform::ops::record_stock(product.get(), "redis", loaded.stock());
    tracing::info!(product_id = %product, initial_stock = body.stock, ?loaded, "Product loaded for sale.");

    Ok(HttpResponse::Ok().json(ProductView {
        product_id: product.get(),
        name: definition.name,
        initial_stock: body.stock,
        stock: loaded.stock(),
        per_user_limit: body.per_user_limit,
        starts_at: rfc3339_ms(terms.starts_at_ms),
        ends_at: rfc3339_ms(terms.ends_at_ms),
        price_cents: body.price_cents,
    }))
}

/// What Redis did for a PUT.
#[derive(Debug, Clone, Copy)]
enum RedisChange {
    /// A new sale, `stock` units on sale.
    Defined { stock: i64 },
    /// The running sale restocked: its initial stock and stock moved by `delta`.
    Restocked { delta: i64, stock: i64 },
}

impl RedisChange {
    fn stock(self) -> i64 {
        match self {
            Self::Defined { stock } | Self::Restocked { stock, .. } => stock,
        }
    }
}

/// The answer of the load MySQL commits after.
enum Loaded {
    Known(RedisChange),
    /// The script was sent and no answer came: it may have run. MySQL commits when that
    /// is the safe side (see [`load_into_redis`]), and the operator sends the PUT again.
    FateUnknown(stock_cache::CacheError),
}

/// The Redis half of a PUT, run while MySQL holds the product's rows; an error rolls
/// MySQL back. With `force`, the running sale is restocked in one step (`restock.lua`);
/// otherwise, or when Redis has no sale of a product MySQL has no orders of, a new sale
/// is loaded, unless Redis has reservations MySQL cannot see yet.
///
/// When Redis may or may not have run the script (no answer in time), the two stores
/// must still never let Redis sell a unit MySQL lacks: a PUT that gives MySQL as many
/// units or more commits it (Redis then has the old or the new count, both no more than
/// MySQL's), one that takes units away rolls MySQL back (its old count is no less than
/// either of Redis's). A second PUT with the same body brings both to the same count.
async fn load_into_redis(
    cache: &StockCache,
    product: ProductId,
    terms: SaleTerms,
    force: bool,
    mysql: PutOutcome,
) -> Result<Loaded, ApiError> {
    let answer = if force {
        restock_or_define(cache, product, terms, mysql).await
    } else {
        define(cache, product, terms).await
    };
    match answer {
        Ok(change) => Ok(Loaded::Known(change)),
        Err(Failed::Refused(refusal)) => Err(refusal),
        Err(Failed::Redis(error)) if fate_unknown(&error) && mysql_delta(mysql, terms) >= 0 => {
            Ok(Loaded::FateUnknown(error))
        }
        Err(Failed::Redis(error)) => Err(error.into()),
    }
}

/// Why the Redis half failed.
enum Failed {
    /// The sale's state refuses the PUT; nothing changed.
    Refused(ApiError),
    Redis(stock_cache::CacheError),
}

async fn restock_or_define(
    cache: &StockCache,
    product: ProductId,
    terms: SaleTerms,
    mysql: PutOutcome,
) -> Result<RedisChange, Failed> {
    match cache.restock(product, &terms).await {
        Ok(RestockOutcome::Restocked { delta, stock }) => {
            Ok(RedisChange::Restocked { delta, stock })
        }
        Ok(RestockOutcome::BelowSold { sold }) => Err(Failed::Refused(ApiError::StockBelowSold {
            sold,
            wanted: terms.initial_stock,
        })),
        // MySQL has orders Redis lost: only a reload rebuilds their flows.
        Err(CacheError::NotLoaded) if matches!(mysql, PutOutcome::Restocked { .. }) => {
            Err(Failed::Refused(ApiError::Unavailable {
                message: "the product is not loaded in Redis; reload it before restocking",
                cause: None,
            }))
        }
        Err(CacheError::NotLoaded) => define(cache, product, terms).await,
        Err(error) => Err(Failed::Redis(error)),
    }
}

async fn define(
    cache: &StockCache,
    product: ProductId,
    terms: SaleTerms,
) -> Result<RedisChange, Failed> {
    let spec = LoadSpec {
        initial_stock: terms.initial_stock,
        per_user_limit: terms.per_user_limit,
        starts_at_ms: terms.starts_at_ms,
        ends_at_ms: terms.ends_at_ms,
        sellable_stock: terms.initial_stock,
        mode: LoadMode::Define,
    };
    match cache.load_product(product, &spec).await {
        Ok(_) => Ok(RedisChange::Defined {
            stock: terms.initial_stock,
        }),
        // Reservations whose orders MySQL does not have yet: a sale is running.
        Err(CacheError::SaleRunning) => Err(Failed::Refused(ApiError::OrdersExist)),
        Err(error) => Err(Failed::Redis(error)),
    }
}

/// A call that timed out or lost its connection may have run in Redis.
fn fate_unknown(error: &CacheError) -> bool {
    matches!(error, CacheError::Timeout(_)) || error.may_have_run()
}

/// How many units MySQL's side of the PUT adds to the sale (negative: takes away).
fn mysql_delta(mysql: PutOutcome, terms: SaleTerms) -> i64 {
    match mysql {
        PutOutcome::Created => terms.initial_stock,
        PutOutcome::Replaced { delta } | PutOutcome::Restocked { delta, .. } => delta,
    }
}

/// The answer to a PUT that did not commit. When Redis took units MySQL then failed to
/// commit, they are taken back off sale first, so that Redis never sells more than MySQL
/// may hold; the operator sends the PUT again either way.
async fn put_failed(
    state: &AppState,
    product: ProductId,
    terms: &SaleTerms,
    error: PutError<Loaded, ApiError>,
) -> ApiError {
    match error {
        PutError::Store(StoreError::OrdersExist { .. }) => ApiError::OrdersExist,
        PutError::Store(StoreError::StockBelowSold { sold, wanted, .. }) => {
            ApiError::StockBelowSold { sold, wanted }
        }
        // Input the store cannot hold (validate() should have caught it): the client's
        // fault, not an unreachable MySQL.
        PutError::Store(StoreError::InvalidData(message)) => ApiError::BadRequest(message),
        PutError::Store(error) => error.into(),
        PutError::Load(refusal) => refusal,
        PutError::Commit { loaded, error } => {
            if let Loaded::Known(RedisChange::Restocked { delta, .. }) = loaded
                && delta > 0
            {
                take_back_off_sale(state, product, terms, delta).await;
            }
            ApiError::unavailable(
                "MySQL did not commit the change Redis took; send the PUT again",
                error,
            )
        }
    }
}

/// Restocks Redis back by `delta` units after MySQL failed to commit them.
async fn take_back_off_sale(state: &AppState, product: ProductId, terms: &SaleTerms, delta: i64) {
    let before = SaleTerms {
        initial_stock: terms.initial_stock - delta,
        ..*terms
    };
    match state.cache.restock(product, &before).await {
        Ok(RestockOutcome::Restocked { .. }) => {
            tracing::warn!(product_id = %product, delta, "MySQL did not commit a restock; Redis took it back.");
        }
        outcome => {
            tracing::error!(product_id = %product, delta, ?outcome, "MySQL did not commit a restock and Redis could not take it back: Redis may sell units MySQL lacks until the PUT is sent again.");
        }
    }
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
    /// Units of paid orders.
    paid: i64,
    /// Units of cancelled and expired orders, given back to the sale.
    returned: i64,
    /// Payments that came for an order already closed, to be refunded.
    refunds_due: i64,
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
    let row = state
        .db
        .product(product)
        .await?
        .ok_or(ApiError::NotFound("product"))?;
    let redis_stock = state.cache.stock(product).await?;
    let (mysql_stock, orders) = state.db.stock_and_order_count(product).await?;
    let lifecycle = state.db.lifecycle_counts(product).await?;
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
        flows: state.cache.flow_count(product).await?,
        orders,
        sold_out: state.sold_out.is_sold_out(product),
        paid: lifecycle.paid_units,
        returned: lifecycle.returned_units,
        refunds_due: lifecycle.refunds_due,
    }))
}
