//! The promises a drill holds the system to once it has settled, read straight from MySQL and
//! Redis (never through a service, which may be the thing that is broken).
//!
//! An order holds its units while it is `confirmed` or `paid`; a `cancelled` or `expired`
//! one has given them back, once, in both stores. So, with "held" meaning the units of
//! the orders neither cancelled nor expired:
//!
//! 1. the units held in MySQL are the units taken from Redis stock (initial − Redis stock);
//! 2. no order token twice (orders), no take or give-back twice (stock_flow);
//! 3. MySQL stock + units held = initial stock;
//! 4. Redis stock + Σ open flows = initial stock;
//! 5. every buyer answered 202 has its order: its row in MySQL, and Redis's result saying
//!    it reached MySQL (confirmed, or how it ended), which is what the buyer's status poll
//!    reads;
//! 6. no buyer answered 503 has an order. A drill may well refuse buyers (a broker down, a
//!    Redis stalled); what it may not do is refuse them and sell to them anyway;
//! 7. every unit is on sale, in an open or paid order, or returned — never two of these:
//!    an order holding its units has its flow in Redis and a take in stock_flow with no
//!    give-back; a cancelled or expired one has no flow, a tombstone saying how it ended
//!    (its units went back in Redis), a take and one give-back of as many units in
//!    stock_flow, and Redis's result says the same status as MySQL; a paid one says paid
//!    in Redis and has exactly one payment applied (a second payment is a refund due,
//!    never a second sale); each buyer's count in Redis is the units of their open flows;
//!
//! and, behind those: every flow has its order and no flow is left reserved (every
//! transactional message was resolved one way or the other). Finally `reconcile-svc
//! --once`, the system's own auditor, must find nothing to repair — or, for a drill whose
//! damage only reconcile repairs, must find the sale clean on the run after its repairs.
//!
//! [`settle_and_audit`] polls until all of it holds or the deadline passes; settling is the
//! system's own work (check-back, redelivery, deadlines, optionally reconcile runs), never
//! a sleep.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Integer, Unsigned, Varchar};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{FlowState, OrderStatus, OrderToken};
use stock_cache::OrderView;

use crate::crowd::CrowdOutcome;
use crate::drill::{Drill, Sale};

/// How long, and with what help, the system may take to settle.
#[derive(Debug, Clone, Copy)]
pub struct Settle {
    pub within: Duration,
    /// Run `reconcile-svc --once` this often while waiting: for drills whose damage only
    /// reconcile repairs (a flow with no message). `None`: the live path alone (check-back,
    /// redelivery, deadlines) must settle it, and the final reconcile run must find nothing.
    pub reconcile_every: Option<Duration>,
}

impl Settle {
    pub fn within(within: Duration) -> Self {
        Self {
            within,
            reconcile_every: None,
        }
    }

    pub fn reconciling_every(self, every: Duration) -> Self {
        Self {
            reconcile_every: Some(every),
            ..self
        }
    }
}

/// The state of one sale in both stores, and the verdict on it.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// Units put on sale.
    pub initial: i64,
    /// `products.initial_stock` in MySQL.
    pub mysql_initial: Option<i64>,
    pub mysql_stock: Option<i64>,
    pub redis_stock: Option<i64>,
    /// Order rows, the units they hold, and their distinct tokens.
    pub orders: usize,
    pub order_units: i64,
    pub distinct_orders: usize,
    /// Units of the orders neither cancelled nor expired: still sold.
    pub held_units: i64,
    /// Orders by MySQL status (`confirmed`, `paid`, `cancelled`, `expired`).
    pub statuses: BTreeMap<String, usize>,
    /// stock_flow rows (takes and give-backs), their net units (takes − give-backs), and
    /// the give-backs alone.
    pub stock_flows: usize,
    pub stock_flow_units: i64,
    pub give_backs: usize,
    /// Flow records in Redis, their units, and those still reserved.
    pub flows: usize,
    pub flow_units: i64,
    pub reserved_flows: usize,
    /// Payments recorded: applied to an order, and due for refund (they came after it ended).
    pub payments_applied: usize,
    pub refunds_due: usize,
    /// Purchases answered 202, and how many of them have their order in both stores.
    pub accepted: usize,
    pub accepted_confirmed: usize,
    /// Purchases answered 503, and how many of them have an order all the same.
    pub unavailable: usize,
    pub unavailable_ordered: usize,
    /// Every promise the state breaks; empty once settled.
    pub violations: Vec<String>,
    /// From the start of [`settle_and_audit`] until every promise held.
    pub settled_after: Duration,
    /// `reconcile-svc --once` after settling (the clean run, after any repairing one).
    pub reconcile_table: String,
}

impl Audit {
    /// Orders MySQL holds in `status`.
    pub fn count(&self, status: OrderStatus) -> usize {
        self.statuses.get(status.as_str()).copied().unwrap_or(0)
    }
}

impl fmt::Display for Audit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "initial {} (MySQL {:?}); stock: MySQL {:?}, Redis {:?}",
            self.initial, self.mysql_initial, self.mysql_stock, self.redis_stock
        )?;
        writeln!(
            f,
            "orders {} ({} units, {} held, {} distinct) {:?}; stock_flow {} ({} net units, {} \
             give-backs); flows {} ({} units, {} reserved); payments applied {}, refunds due {}",
            self.orders,
            self.order_units,
            self.held_units,
            self.distinct_orders,
            self.statuses,
            self.stock_flows,
            self.stock_flow_units,
            self.give_backs,
            self.flows,
            self.flow_units,
            self.reserved_flows,
            self.payments_applied,
            self.refunds_due
        )?;
        writeln!(
            f,
            "accepted {} of which ordered {}; answered 503 {} of which ordered {}",
            self.accepted, self.accepted_confirmed, self.unavailable, self.unavailable_ordered
        )?;
        for violation in &self.violations {
            writeln!(f, "  ✗ {violation}")?;
        }
        Ok(())
    }
}

/// Waits until the sale keeps every promise (see the module docs) or `settle.within`
/// passes, then has `reconcile-svc --once` audit it too. Panics with the broken promises,
/// the numbers, the crowd's outcome and the logs to read; returns the settled state.
pub async fn settle_and_audit(
    drill: &Drill,
    sale: &Sale,
    crowd: &CrowdOutcome,
    settle: Settle,
) -> Audit {
    let started = Instant::now();
    let deadline = started + settle.within;
    let mut last_reconcile = Instant::now();
    let mut audit = loop {
        let audit = audit_once(drill, sale, crowd).await;
        if audit.violations.is_empty() {
            break audit;
        }
        if Instant::now() >= deadline {
            panic!(
                "drill did not settle within {:?}:\n{audit}crowd: {crowd}\nlogs: {:#?}",
                settle.within,
                drill.log_paths()
            );
        }
        if let Some(every) = settle.reconcile_every
            && last_reconcile.elapsed() >= every
        {
            let run = drill.reconcile_once(sale.product).await;
            eprintln!("reconcile while settling:\n{}{}", run.table, run.stderr);
            last_reconcile = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    audit.settled_after = started.elapsed();

    let mut run = drill.reconcile_once(sale.product).await;
    if !run.is_clean() && settle.reconcile_every.is_some() {
        // Reconcile may repair what the drill allows it to; its repairs must keep every
        // promise, and the run after them must find nothing left.
        eprintln!("reconcile after settling:\n{}{}", run.table, run.stderr);
        let repaired = audit_once(drill, sale, crowd).await;
        assert!(
            repaired.violations.is_empty(),
            "reconcile-svc --once broke the settled sale:\n{repaired}{}",
            run.table
        );
        run = drill.reconcile_once(sale.product).await;
    }
    assert!(
        run.is_clean(),
        "the system settled ({audit}) but reconcile-svc --once did not find it clean \
         ({}):\n{}{}",
        run.status,
        run.table,
        run.stderr
    );
    audit.reconcile_table = run.table;
    audit
}

#[derive(QueryableByName)]
struct OrderRow {
    #[diesel(sql_type = Varchar)]
    order_token: String,
    #[diesel(sql_type = Unsigned<Integer>)]
    quantity: u32,
    #[diesel(sql_type = Varchar)]
    status: String,
}

impl OrderRow {
    /// Cancelled or expired: its units went back.
    fn returned(&self) -> bool {
        self.status
            .parse::<OrderStatus>()
            .is_ok_and(OrderStatus::returned_units)
    }
}

#[derive(QueryableByName)]
struct StockFlowRow {
    #[diesel(sql_type = Varchar)]
    order_token: String,
    /// A take (> 0) or a give-back (< 0).
    #[diesel(sql_type = Integer)]
    quantity: i32,
}

#[derive(QueryableByName)]
struct PaymentRow {
    #[diesel(sql_type = Varchar)]
    order_token: String,
    #[diesel(sql_type = Varchar)]
    outcome: String,
}

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// MySQL's view of the sale: initial stock, stock, orders, stock_flow rows, payments.
struct MysqlView {
    initial: Option<i64>,
    stock: Option<i64>,
    orders: Vec<OrderRow>,
    stock_flows: Vec<StockFlowRow>,
    payments: Vec<PaymentRow>,
}

async fn read_mysql(url: &str, sale: &Sale) -> Result<MysqlView, String> {
    let product = sale.product.get();
    let mut conn = AsyncMysqlConnection::establish(url)
        .await
        .map_err(|e| format!("cannot connect to MySQL: {e}"))?;
    let number = async |conn: &mut AsyncMysqlConnection, sql: &str| {
        diesel::sql_query(sql)
            .bind::<Unsigned<BigInt>, _>(product)
            .get_result::<Number>(conn)
            .await
            .map(|row| row.n)
            .map_err(|e| e.to_string())
    };
    let initial = number(
        &mut conn,
        "SELECT initial_stock AS n FROM products WHERE id = ?",
    )
    .await
    .ok();
    let stock = number(
        &mut conn,
        "SELECT stock AS n FROM product_stock WHERE product_id = ?",
    )
    .await
    .ok();
    let orders =
        diesel::sql_query("SELECT order_token, quantity, status FROM orders WHERE product_id = ?")
            .bind::<Unsigned<BigInt>, _>(product)
            .load::<OrderRow>(&mut conn)
            .await
            .map_err(|e| format!("reading orders: {e}"))?;
    let stock_flows =
        diesel::sql_query("SELECT order_token, quantity FROM stock_flow WHERE product_id = ?")
            .bind::<Unsigned<BigInt>, _>(product)
            .load::<StockFlowRow>(&mut conn)
            .await
            .map_err(|e| format!("reading stock_flow: {e}"))?;
    let payments =
        diesel::sql_query("SELECT order_token, outcome FROM payments WHERE product_id = ?")
            .bind::<Unsigned<BigInt>, _>(product)
            .load::<PaymentRow>(&mut conn)
            .await
            .map_err(|e| format!("reading payments: {e}"))?;
    Ok(MysqlView {
        initial,
        stock,
        orders,
        stock_flows,
        payments,
    })
}

/// Redis's view of the sale: stock, open flows, each buyer's count, and what it says of
/// every order token asked about.
struct RedisView {
    stock: Option<i64>,
    /// Order token → (user, units, still reserved).
    flows: BTreeMap<String, (u64, u32, bool)>,
    /// Units each buyer holds by the `users` hash.
    users: BTreeMap<u64, i64>,
    orders: BTreeMap<String, OrderView>,
    unreadable: Vec<String>,
}

async fn read_redis<'a>(
    drill: &Drill,
    sale: &Sale,
    tokens: impl IntoIterator<Item = &'a str>,
) -> Result<RedisView, String> {
    let cache = drill.stack.redis.cache();
    let stock = cache
        .stock(sale.product)
        .await
        .map_err(|e| format!("cannot read Redis stock: {e}"))?;
    let mut view = RedisView {
        stock,
        flows: BTreeMap::new(),
        users: BTreeMap::new(),
        orders: BTreeMap::new(),
        unreadable: Vec::new(),
    };
    let mut cursor = 0;
    loop {
        let page = cache
            .scan_flows(sale.product, cursor, 1000)
            .await
            .map_err(|e| format!("cannot scan flows: {e}"))?;
        for (token, flow) in page.flows {
            view.flows.insert(
                token.to_string(),
                (
                    flow.user_id.get(),
                    flow.quantity,
                    flow.state == FlowState::Reserved,
                ),
            );
        }
        view.unreadable.extend(page.unreadable);
        cursor = page.next_cursor;
        if cursor == 0 {
            break;
        }
    }
    let users_key = cache.keys(sale.product).users;
    let users = cache
        .units_by_buyer(sale.product)
        .await
        .map_err(|e| format!("cannot read {users_key}: {e}"))?;
    for (user, units) in users {
        let user = user
            .parse()
            .map_err(|_| format!("{users_key} has a user {user:?} that is not a number"))?;
        view.users.insert(user, units);
    }
    for token in tokens {
        if view.orders.contains_key(token) {
            continue;
        }
        let Ok(parsed) = token.parse::<OrderToken>() else {
            continue;
        };
        let order = cache
            .order_view(&parsed)
            .await
            .map_err(|e| format!("cannot read order {token} in Redis: {e}"))?;
        view.orders.insert(token.to_owned(), order);
    }
    Ok(view)
}

/// One reading of both stores against the crowd's answers.
pub async fn audit_once(drill: &Drill, sale: &Sale, crowd: &CrowdOutcome) -> Audit {
    let mut audit = Audit {
        initial: sale.stock,
        ..Audit::default()
    };
    let accepted = crowd.accepted_tokens();
    audit.accepted = accepted.len();

    let mysql = match read_mysql(drill.stack.db.url(), sale).await {
        Ok(view) => view,
        Err(error) => {
            audit.violations.push(error);
            return audit;
        }
    };
    let tokens = mysql
        .orders
        .iter()
        .map(|o| o.order_token.as_str())
        .chain(accepted.iter().map(String::as_str));
    let redis = match read_redis(drill, sale, tokens).await {
        Ok(view) => view,
        Err(error) => {
            audit.violations.push(error);
            return audit;
        }
    };

    audit.mysql_initial = mysql.initial;
    audit.mysql_stock = mysql.stock;
    audit.redis_stock = redis.stock;
    audit.orders = mysql.orders.len();
    audit.order_units = mysql.orders.iter().map(|o| i64::from(o.quantity)).sum();
    audit.held_units = mysql
        .orders
        .iter()
        .filter(|o| !o.returned())
        .map(|o| i64::from(o.quantity))
        .sum();
    for order in &mysql.orders {
        *audit.statuses.entry(order.status.clone()).or_default() += 1;
    }
    let orders: BTreeMap<&str, &OrderRow> = mysql
        .orders
        .iter()
        .map(|o| (o.order_token.as_str(), o))
        .collect();
    audit.distinct_orders = orders.len();
    audit.stock_flows = mysql.stock_flows.len();
    audit.stock_flow_units = mysql
        .stock_flows
        .iter()
        .map(|s| i64::from(s.quantity))
        .sum();
    audit.give_backs = mysql.stock_flows.iter().filter(|s| s.quantity < 0).count();
    audit.payments_applied = mysql
        .payments
        .iter()
        .filter(|p| p.outcome == "applied")
        .count();
    audit.refunds_due = mysql
        .payments
        .iter()
        .filter(|p| p.outcome == "refund_due")
        .count();
    audit.flows = redis.flows.len();
    audit.flow_units = redis.flows.values().map(|f| i64::from(f.1)).sum();
    audit.reserved_flows = redis.flows.values().filter(|f| f.2).count();

    let mut unconfirmed = Vec::new();
    for token in &accepted {
        let in_mysql = orders.get(token.as_str()).map(|o| o.status.as_str());
        let in_redis = redis.orders.get(token).is_some_and(|view| view.confirmed);
        if in_mysql.is_some() && in_redis {
            audit.accepted_confirmed += 1;
        } else {
            unconfirmed.push(format!(
                "{token} (MySQL: {}, Redis: {})",
                in_mysql.unwrap_or("no order"),
                if in_redis {
                    "confirmed"
                } else {
                    "not confirmed"
                }
            ));
        }
    }

    let ordered_anyway = ordered_anyway(crowd, &orders);
    audit.unavailable = crowd.unavailable_tokens().len();
    audit.unavailable_ordered = ordered_anyway.len();

    audit.violations = totals_broken(&audit);
    if !redis.unreadable.is_empty() {
        audit
            .violations
            .push(format!("unreadable flow records: {:?}", redis.unreadable));
    }
    audit
        .violations
        .extend(units_broken(&orders, &mysql, &redis));
    if !ordered_anyway.is_empty() {
        audit.violations.push(format!(
            "{} of {} buyers answered 503 have an order, e.g. {}",
            ordered_anyway.len(),
            audit.unavailable,
            ordered_anyway
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !unconfirmed.is_empty() {
        unconfirmed.truncate(10);
        audit.violations.push(format!(
            "{} of {} buyers answered 202 have no order in both stores, e.g. {}",
            audit.accepted - audit.accepted_confirmed,
            audit.accepted,
            unconfirmed.join(", ")
        ));
    }
    audit
}

/// The order tokens of purchases answered 503 that have an order row, with its status.
fn ordered_anyway(crowd: &CrowdOutcome, orders: &BTreeMap<&str, &OrderRow>) -> Vec<String> {
    crowd
        .unavailable_tokens()
        .into_iter()
        .filter_map(|token| {
            let order = orders.get(token.as_str())?;
            Some(format!("{token} ({})", order.status))
        })
        .collect()
}

/// The broken promises among the totals (promises 1 to 4).
fn totals_broken(audit: &Audit) -> Vec<String> {
    let mut broken = Vec::new();
    let initial = audit.initial;
    if audit.mysql_initial != Some(initial) {
        broken.push(format!(
            "MySQL says the initial stock is {:?}, the sale put {initial} on sale",
            audit.mysql_initial
        ));
    }
    match audit.redis_stock {
        Some(redis) if audit.held_units != initial - redis => broken.push(format!(
            "{} units held by orders in MySQL, {} taken from Redis stock ({initial} − {redis})",
            audit.held_units,
            initial - redis
        )),
        Some(_) => {}
        None => broken.push("Redis has no stock for the product".into()),
    }
    if audit.distinct_orders != audit.orders {
        broken.push(format!(
            "{} order rows for {} order tokens",
            audit.orders, audit.distinct_orders
        ));
    }
    match audit.mysql_stock {
        Some(stock) if stock + audit.held_units != initial => broken.push(format!(
            "MySQL stock {stock} + {} units held by orders neither cancelled nor expired ≠ \
             {initial}",
            audit.held_units
        )),
        Some(_) => {}
        None => broken.push("MySQL has no stock row for the product".into()),
    }
    if let Some(redis) = audit.redis_stock
        && redis + audit.flow_units != initial
    {
        broken.push(format!(
            "Redis stock {redis} + {} units in open flows ≠ {initial}",
            audit.flow_units
        ));
    }
    if audit.stock_flow_units != audit.held_units {
        broken.push(format!(
            "stock_flow takes {} units net of give-backs for {} units held by orders",
            audit.stock_flow_units, audit.held_units
        ));
    }
    if audit.reserved_flows > 0 {
        broken.push(format!(
            "{} flows are still reserved (their message neither committed nor rolled back)",
            audit.reserved_flows
        ));
    }
    broken
}

/// Where one order's units are, by each store's account.
#[derive(Default)]
struct Units {
    takes: Vec<i32>,
    give_backs: Vec<i32>,
    payments_applied: usize,
}

/// The broken promises order by order (promise 7, and the flows' side of promise 2): every
/// unit in exactly one place, the same place in both stores.
fn units_broken(
    orders: &BTreeMap<&str, &OrderRow>,
    mysql: &MysqlView,
    redis: &RedisView,
) -> Vec<String> {
    let mut units: BTreeMap<&str, Units> = BTreeMap::new();
    for row in &mysql.stock_flows {
        let entry = units.entry(row.order_token.as_str()).or_default();
        if row.quantity < 0 {
            entry.give_backs.push(-row.quantity);
        } else {
            entry.takes.push(row.quantity);
        }
    }
    for payment in mysql.payments.iter().filter(|p| p.outcome == "applied") {
        units
            .entry(payment.order_token.as_str())
            .or_default()
            .payments_applied += 1;
    }

    // Each kind of broken promise, with the tokens that break it.
    let mut broken: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut breaks = |promise: &'static str, token: &str| {
        broken.entry(promise).or_default().push(token.to_owned());
    };
    let none = Units::default();
    for (token, order) in orders {
        let status = order.status.parse::<OrderStatus>().ok();
        let flow = redis.flows.get(*token);
        let view = redis.orders.get(*token);
        let tomb = view.and_then(|v| v.tombstone.as_ref());
        let said = view.and_then(|v| v.status);
        let sf = units.get(token).unwrap_or(&none);
        if sf.takes.len() != 1 || sf.takes[0] != i32::try_from(order.quantity).unwrap_or(-1) {
            breaks(
                "orders without exactly one take of their units in stock_flow",
                token,
            );
        }
        if sf.payments_applied > 1 {
            breaks("orders with more than one payment applied", token);
        }
        match status {
            Some(OrderStatus::Confirmed | OrderStatus::Paid) => {
                if flow.is_none() {
                    breaks("open or paid orders without their flow in Redis", token);
                }
                if tomb.and_then(|t| t.closing()).is_some() {
                    breaks("open or paid orders whose units Redis gave back", token);
                }
                if !sf.give_backs.is_empty() {
                    breaks("open or paid orders with a give-back in stock_flow", token);
                }
                let paid = status == Some(OrderStatus::Paid);
                if paid != (sf.payments_applied == 1) {
                    breaks(
                        "orders paid in MySQL without one payment applied, or the reverse",
                        token,
                    );
                }
                if paid && said != Some(OrderStatus::Paid) {
                    breaks("paid orders Redis does not say are paid", token);
                }
            }
            Some(closed @ (OrderStatus::Cancelled | OrderStatus::Expired)) => {
                if flow.is_some() {
                    breaks(
                        "cancelled or expired orders whose units Redis still holds",
                        token,
                    );
                }
                if tomb.map(|t| t.status()) != Some(closed) {
                    breaks(
                        "cancelled or expired orders without a tombstone of their ending in Redis",
                        token,
                    );
                }
                if said != Some(closed) {
                    breaks(
                        "cancelled or expired orders Redis says ended otherwise",
                        token,
                    );
                }
                if sf.give_backs.len() != 1 || sf.give_backs != sf.takes {
                    breaks(
                        "cancelled or expired orders without exactly one give-back of their take \
                         in stock_flow",
                        token,
                    );
                }
                if sf.payments_applied > 0 {
                    breaks("cancelled or expired orders with a payment applied", token);
                }
            }
            _ => breaks(
                "orders neither confirmed, paid, cancelled nor expired in MySQL",
                token,
            ),
        }
    }
    for token in redis.flows.keys() {
        if !orders.contains_key(token.as_str()) {
            breaks("flows in Redis without an order in MySQL", token);
        }
    }
    for token in units.keys() {
        if !orders.contains_key(token) {
            breaks("stock_flow rows without an order", token);
        }
    }
    let mut held_by_user: BTreeMap<u64, i64> = BTreeMap::new();
    for (user, quantity, _) in redis.flows.values() {
        *held_by_user.entry(*user).or_default() += i64::from(*quantity);
    }
    let counted: BTreeSet<u64> = held_by_user
        .keys()
        .chain(redis.users.keys())
        .copied()
        .collect();
    for user in counted {
        let (held, count) = (
            held_by_user.get(&user).copied().unwrap_or(0),
            redis.users.get(&user).copied().unwrap_or(0),
        );
        if held != count {
            breaks(
                "buyers whose count in Redis is not the units of their open flows",
                &format!("user {user} (count {count}, flows {held})"),
            );
        }
    }
    broken
        .into_iter()
        .map(|(promise, tokens)| {
            let sample: Vec<&str> = tokens.iter().take(5).map(String::as_str).collect();
            format!("{} {promise}, e.g. {}", tokens.len(), sample.join(", "))
        })
        .collect()
}
