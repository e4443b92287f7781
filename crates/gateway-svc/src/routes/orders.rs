//! The buyer's order after the purchase: its status (now, or as soon as it changes), its
//! stream of changes, and its cancel.

use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use chrono::Utc;
use domain::{Closing, OrderStatus, OrderToken, UserId};
use order_lifecycle::Ending;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::identity::Buyer;
use crate::responses::{BadRequest, Conflict, NotFound, RateLimited, Unauthenticated, Unavailable};
use crate::routes::{AppState, rfc3339_ms};
use crate::watch::Watcher;

/// How long an order may be queued in Redis before status polling asks MySQL whether it is
/// there after all (the consumer wrote it, but its confirmation never reached Redis). An
/// order normally reaches MySQL well within this, so the crowd polling its young orders
/// never reaches MySQL; and the answer is written back to Redis, so an order costs MySQL
/// one look, not one per poll.
pub const ASK_MYSQL_AFTER: Duration = Duration::from_secs(5);

/// The longest long-poll (`?wait_secs=`).
pub const MAX_WAIT_SECS: u64 = 30;

/// An order as its buyer sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct OrderView {
    #[schema(pattern = r"^[0-9]+-[0-9a-f]{32}$")]
    order_token: String,
    #[schema(format = "uint64", maximum = 18_446_744_073_709_551_615_u64)]
    product_id: u64,
    #[schema(format = "uint32", maximum = 4_294_967_295_u32)]
    quantity: u32,
    #[schema(value_type = OrderStatusWord)]
    status: OrderStatus,
    /// Until when a confirmed order waits for its payment (RFC 3339, UTC, milliseconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pay_by: Option<String>,
}

/// `queued`: accepted, not yet in MySQL; `confirmed`: in MySQL, awaiting payment until
/// `pay_by`; `paid`; `cancelled` (by the buyer); `expired` (not paid by `pay_by`); `failed`:
/// the reservation was given back before its order was written.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // Only the document's description of `OrderStatus`.
#[serde(rename_all = "lowercase")]
enum OrderStatusWord {
    Queued,
    Confirmed,
    Paid,
    Cancelled,
    Expired,
    Failed,
}

/// What this gateway knows of an order, with whose it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub owner: UserId,
    pub view: OrderView,
}

impl Snapshot {
    fn new(
        token: &OrderToken,
        owner: UserId,
        quantity: u32,
        status: OrderStatus,
        pay_by_ms: Option<i64>,
    ) -> Self {
        Self {
            owner,
            view: OrderView {
                order_token: token.to_string(),
                product_id: token.product_id().get(),
                quantity,
                status,
                pay_by: pay_by_ms.and_then(rfc3339_ms),
            },
        }
    }

    pub fn of_row(row: &order_store::OrderRow) -> Self {
        Self::new(
            &row.order_token,
            row.user_id,
            row.quantity,
            row.status,
            row.pay_by.map(|t| t.timestamp_millis()),
        )
    }

    pub fn status(&self) -> OrderStatus {
        self.view.status
    }
}

/// The order as Redis knows it (the crowd's path: no MySQL), or as MySQL does when Redis
/// has no trace of it or cannot be reached. `None`: neither knows it.
pub async fn look_up(state: &AppState, token: &OrderToken) -> Result<Option<Snapshot>, ApiError> {
    let view = match state.cache.order_view(token).await {
        Ok(view) => view,
        // Redis is down: MySQL still knows every written order.
        Err(_) => return from_mysql(state, token).await,
    };
    if let Some(flow) = &view.flow {
        let (status, pay_by_ms) = match view.status {
            Some(status) if status != OrderStatus::Queued => (status, view.pay_by_ms),
            _ => queued_or_written(state, token, flow).await,
        };
        return Ok(Some(Snapshot::new(
            token,
            flow.user_id,
            flow.quantity,
            status,
            pay_by_ms,
        )));
    }
    if let Some(tomb) = &view.tombstone
        && let Some(owner) = tomb.user_id
    {
        // A returned order's result says how it ended; any other tomb is a reservation given
        // back before its order was written.
        let status = view
            .status
            .filter(|status| status.returned_units())
            .unwrap_or(OrderStatus::Failed);
        return Ok(Some(Snapshot::new(
            token,
            owner,
            tomb.quantity.unwrap_or(0),
            status,
            view.pay_by_ms,
        )));
    }
    from_mysql(state, token).await
}

/// A flow Redis has no confirmation for: queued, unless it was reserved long enough ago
/// ([`ASK_MYSQL_AFTER`]) that MySQL may hold its order while the confirmation was lost. A
/// few such looks at once per gateway: past them, or when MySQL cannot answer, the order
/// stays `queued` for this poll and the next one asks again.
async fn queued_or_written(
    state: &AppState,
    token: &OrderToken,
    flow: &domain::FlowRecord,
) -> (OrderStatus, Option<i64>) {
    /// Looks at MySQL under way at once, so that even a crowd of stale orders (a stopped
    /// consumer's backlog) puts a bounded load on it.
    static MYSQL_LOOKS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);

    let age_ms = Utc::now().timestamp_millis() - flow.reserved_at_ms;
    let stale = u128::try_from(age_ms).is_ok_and(|age| age >= ASK_MYSQL_AFTER.as_millis());
    if !stale {
        return (OrderStatus::Queued, None);
    }
    let Ok(_look) = MYSQL_LOOKS.try_acquire() else {
        return (OrderStatus::Queued, None);
    };
    match state.db.order(token).await {
        Ok(Some(row)) => {
            let pay_by_ms = row.pay_by.map(|t| t.timestamp_millis());
            if row.status == OrderStatus::Confirmed
                && let Some(pay_by_ms) = pay_by_ms
                && let Err(error) = state
                    .cache
                    .mark_confirmed_until(&[(token.clone(), pay_by_ms)])
                    .await
            {
                tracing::warn!(order = %token.short(), error = %error, "Could not record in Redis an order MySQL holds.");
            }
            (row.status, pay_by_ms)
        }
        Ok(None) => (OrderStatus::Queued, None),
        Err(error) => {
            tracing::warn!(order = %token.short(), error = %error, "MySQL did not answer whether a queued order is written.");
            (OrderStatus::Queued, None)
        }
    }
}

async fn from_mysql(state: &AppState, token: &OrderToken) -> Result<Option<Snapshot>, ApiError> {
    Ok(state.db.order(token).await?.as_ref().map(Snapshot::of_row))
}

/// The buyer's own order, or 404: another buyer's, a malformed token and an unknown one
/// all read the same, since an order's existence is not ours to tell.
async fn own_order(
    state: &AppState,
    raw: &str,
    buyer: &Buyer,
) -> Result<(OrderToken, Snapshot), ApiError> {
    let token: OrderToken = raw.parse().map_err(|_| ApiError::NotFound("order"))?;
    match look_up(state, &token).await? {
        Some(snapshot) if snapshot.owner == buyer.0 => Ok((token, snapshot)),
        _ => Err(ApiError::NotFound("order")),
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Long-poll: answer as soon as the status changes, or after this many seconds with
    /// the status unchanged (at most 30; 0 or absent: at once).
    #[param(maximum = 30)]
    wait_secs: Option<u64>,
}

/// An order's status.
///
/// The buyer's own orders only: another buyer's, a malformed token and an unknown one are
/// all 404. With `?wait_secs=N` the answer waits until the status changes (on whichever
/// gateway or service it changes), at most N seconds. Counts against the instance-wide rate
/// limit only (clients poll it); a long-poll also takes one of the instance's
/// `orders.max_watchers` seats (429 when none is left).
#[utoipa::path(
    get,
    path = "/api/v1/orders/{order_token}",
    tag = "buyer",
    params(("order_token" = String, Path, description = "The order token from the purchase, `<product>-<32 hex>`."), WaitQuery),
    security(("buyer" = [])),
    responses(
        (status = 200, description = "The order.", body = OrderView),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, response = NotFound),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    )
)]
pub async fn order_status(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<WaitQuery>,
    buyer: Buyer,
) -> Result<HttpResponse, ApiError> {
    // Only the instance-wide limit: clients poll this while their order is queued, and the
    // per-buyer budget is for the buy path.
    state.limits.check_global()?;
    let wait_secs = query.wait_secs.unwrap_or(0);
    if wait_secs > MAX_WAIT_SECS {
        return Err(ApiError::BadRequest(format!(
            "wait_secs is at most {MAX_WAIT_SECS}"
        )));
    }
    let (token, first) = own_order(&state, &path, &buyer).await?;
    if wait_secs == 0 || first.status().is_final() {
        return Ok(HttpResponse::Ok().json(first.view));
    }
    let mut watcher = seat(&state, &token)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_secs);
    let recheck = state.watch_recheck;
    loop {
        // Read after the watcher exists: a change between the first read and now wakes it.
        let now = look_up(&state, &token).await?;
        if let Some(now) = now.filter(|now| now.view != first.view) {
            return Ok(HttpResponse::Ok().json(now.view));
        }
        tokio::select! {
            () = watcher.changed() => {}
            () = tokio::time::sleep(recheck) => {}
            () = tokio::time::sleep_until(deadline) => break,
            () = state.watch.closing().cancelled() => break,
        }
    }
    Ok(HttpResponse::Ok().json(first.view))
}

fn seat(state: &AppState, token: &OrderToken) -> Result<Watcher, ApiError> {
    state.watch.watch(token).ok_or(ApiError::RateLimited {
        retry_after_secs: 1,
    })
}

/// An order's changes as they happen (server-sent events).
///
/// The current status at once, then an `event: status` with the order as its `data` at
/// each change, wherever it happened; the stream ends after a final status (`paid`,
/// `cancelled`, `expired`, `failed`), and when the gateway stops. A comment line every
/// `orders.watch_recheck_secs` keeps proxies from closing a quiet stream. Takes one of the
/// instance's `orders.max_watchers` seats (429 when none is left).
#[utoipa::path(
    get,
    path = "/api/v1/orders/{order_token}/events",
    tag = "buyer",
    params(("order_token" = String, Path, description = "The order token from the purchase, `<product>-<32 hex>`.")),
    security(("buyer" = [])),
    responses(
        (status = 200, description = "`text/event-stream`: `event: status`, `data:` the order.", content_type = "text/event-stream", body = OrderView),
        (status = 401, response = Unauthenticated),
        (status = 404, response = NotFound),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    )
)]
pub async fn order_events(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    let (token, first) = own_order(&state, &path, &buyer).await?;
    let watcher = seat(&state, &token)?;
    let stream = EventStream {
        state: state.clone(),
        token,
        watcher,
        last: None,
        pending: Some(first),
    };
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        // nginx would otherwise buffer the stream until it ends.
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(futures::stream::unfold(stream, EventStream::next)))
}

struct EventStream {
    state: web::Data<AppState>,
    token: OrderToken,
    watcher: Watcher,
    /// The last view sent; `None` before the first.
    last: Option<OrderView>,
    /// A read not yet sent.
    pending: Option<Snapshot>,
}

impl EventStream {
    /// The next chunk of the stream, or `None` once it is over.
    async fn next(mut self) -> Option<(Result<Bytes, actix_web::Error>, Self)> {
        if self
            .last
            .as_ref()
            .is_some_and(|last| last.status.is_final())
        {
            return None;
        }
        loop {
            if let Some(snapshot) = self.pending.take()
                && self.last.as_ref() != Some(&snapshot.view)
            {
                let chunk = sse_event(&snapshot.view);
                self.last = Some(snapshot.view);
                return Some((Ok(chunk), self));
            }
            let recheck = self.state.watch_recheck;
            let woken = tokio::select! {
                () = self.watcher.changed() => true,
                () = tokio::time::sleep(recheck) => false,
                () = self.state.watch.closing().cancelled() => return None,
            };
            // Unknown now (Redis lost it mid-stream) or unreadable: say nothing new.
            if let Ok(Some(snapshot)) = look_up(&self.state, &self.token).await {
                self.pending = Some(snapshot);
            }
            let unchanged = self
                .pending
                .as_ref()
                .is_none_or(|now| self.last.as_ref() == Some(&now.view));
            if !woken && unchanged {
                return Some((Ok(Bytes::from_static(b": still waiting\n\n")), self));
            }
        }
    }
}

fn sse_event(view: &OrderView) -> Bytes {
    let data = serde_json::to_string(view).expect("an order view always serialises");
    Bytes::from(format!("event: status\ndata: {data}\n\n"))
}

/// Cancel an order awaiting payment.
///
/// The buyer's own confirmed order: it ends `cancelled` and its units go back on sale. 409
/// `ORDER_CLOSED` when it is already paid, cancelled or expired; 409 `NOT_CONFIRMED` (with
/// `Retry-After`) while it is still queued.
#[utoipa::path(
    post,
    path = "/api/v1/orders/{order_token}/cancel",
    tag = "buyer",
    params(("order_token" = String, Path, description = "The order token from the purchase, `<product>-<32 hex>`.")),
    security(("buyer" = [])),
    responses(
        (status = 200, description = "The order, cancelled.", body = OrderView),
        (status = 401, response = Unauthenticated),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 429, response = RateLimited),
        (status = 503, response = Unavailable),
    )
)]
pub async fn cancel_order(
    state: web::Data<AppState>,
    path: web::Path<String>,
    buyer: Buyer,
) -> Result<HttpResponse, ApiError> {
    state.limits.check_global()?;
    state.limits.check_user(buyer.0)?;
    let (token, snapshot) = own_order(&state, &path, &buyer).await?;
    if snapshot.status() == OrderStatus::Queued {
        return Err(ApiError::NotConfirmed);
    }
    match order_lifecycle::close(&state.db, &state.cache, &token, Closing::Cancelled).await? {
        Ending::Now(row) => Ok(HttpResponse::Ok().json(Snapshot::of_row(&row).view)),
        Ending::Before(row) | Ending::NotDue(row) => Err(ApiError::OrderClosed(row.status)),
        // Redis knows the order, MySQL not yet: the consumer has still to write it.
        Ending::Unknown => Err(ApiError::NotConfirmed),
    }
}
