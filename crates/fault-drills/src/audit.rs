//! The promises a drill holds the system to once it has settled, read straight from MySQL and
//! Redis (never through a service, which may be the thing that is broken):
//!
//! 1. the units of the orders in MySQL are the units taken from Redis stock;
//! 2. no order token twice (orders, stock_flow);
//! 3. MySQL stock + Σ orders = initial stock;
//! 4. Redis stock + Σ flows = initial stock;
//! 5. every buyer answered 202 has a confirmed order: its row in MySQL, and "confirmed" in
//!    Redis, which is what the buyer's status poll reads;
//! 6. no buyer answered 503 has an order. A drill may well refuse buyers (a broker down, a
//!    Redis stalled); what it may not do is refuse them and sell to them anyway;
//!
//! and, behind those: every order has its flow and its stock_flow row, and no flow is left
//! reserved (every transactional message was resolved one way or the other). Finally
//! `reconcile-svc --once`, the system's own auditor, must find nothing to repair.
//!
//! [`settle_and_audit`] polls until all of it holds or the deadline passes; settling is the
//! system's own work (check-back, redelivery, optionally reconcile runs), never a sleep.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Integer, Unsigned, Varchar};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::{FlowState, OrderToken};

use crate::crowd::CrowdOutcome;
use crate::drill::{Drill, Sale};

/// How long, and with what help, the system may take to settle.
#[derive(Debug, Clone, Copy)]
pub struct Settle {
    pub within: Duration,
    /// Run `reconcile-svc --once` this often while waiting: for drills whose damage only
    /// reconcile repairs (a flow with no message). `None`: the live path alone (check-back,
    /// redelivery) must settle it, and the final reconcile run must find nothing.
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
    /// stock_flow rows (every op type), their units and distinct tokens.
    pub stock_flows: usize,
    pub stock_flow_units: i64,
    pub distinct_stock_flows: usize,
    /// Flow records in Redis, their units, and those still reserved.
    pub flows: usize,
    pub flow_units: i64,
    pub reserved_flows: usize,
    /// Purchases answered 202, and how many of them have a confirmed order.
    pub accepted: usize,
    pub accepted_confirmed: usize,
    /// Purchases answered 503, and how many of them have an order all the same.
    pub unavailable: usize,
    pub unavailable_ordered: usize,
    /// Every promise the state breaks; empty once settled.
    pub violations: Vec<String>,
    /// From the start of [`settle_and_audit`] until every promise held.
    pub settled_after: Duration,
    /// `reconcile-svc --once` after settling.
    pub reconcile_table: String,
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
            "orders {} ({} units, {} distinct); stock_flow {} ({} units, {} distinct); \
             flows {} ({} units, {} reserved)",
            self.orders,
            self.order_units,
            self.distinct_orders,
            self.stock_flows,
            self.stock_flow_units,
            self.distinct_stock_flows,
            self.flows,
            self.flow_units,
            self.reserved_flows
        )?;
        writeln!(
            f,
            "accepted {} of which confirmed {}; answered 503 {} of which ordered {}",
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

    let run = drill.reconcile_once(sale.product).await;
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

#[derive(QueryableByName)]
struct StockFlowRow {
    #[diesel(sql_type = Varchar)]
    order_token: String,
    #[diesel(sql_type = Integer)]
    quantity: i32,
}

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// MySQL's view of the sale: initial stock, stock, orders, stock_flow rows.
struct MysqlView {
    initial: Option<i64>,
    stock: Option<i64>,
    orders: Vec<OrderRow>,
    stock_flows: Vec<StockFlowRow>,
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
    Ok(MysqlView {
        initial,
        stock,
        orders,
        stock_flows,
    })
}

/// One reading of both stores against the crowd's answers.
pub async fn audit_once(drill: &Drill, sale: &Sale, crowd: &CrowdOutcome) -> Audit {
    let mut audit = Audit {
        initial: sale.stock,
        ..Audit::default()
    };
    let cache = drill.stack.redis.cache();
    let accepted = crowd.accepted_tokens();
    audit.accepted = accepted.len();

    let mysql = match read_mysql(drill.stack.db.url(), sale).await {
        Ok(view) => view,
        Err(error) => {
            audit.violations.push(error);
            return audit;
        }
    };
    audit.mysql_initial = mysql.initial;
    audit.mysql_stock = mysql.stock;
    audit.orders = mysql.orders.len();
    audit.order_units = mysql.orders.iter().map(|o| i64::from(o.quantity)).sum();
    let order_status: BTreeMap<&str, &str> = mysql
        .orders
        .iter()
        .map(|o| (o.order_token.as_str(), o.status.as_str()))
        .collect();
    audit.distinct_orders = order_status.len();
    audit.stock_flows = mysql.stock_flows.len();
    audit.stock_flow_units = mysql
        .stock_flows
        .iter()
        .map(|s| i64::from(s.quantity))
        .sum();
    let stock_flow_tokens: BTreeSet<&str> = mysql
        .stock_flows
        .iter()
        .map(|s| s.order_token.as_str())
        .collect();
    audit.distinct_stock_flows = stock_flow_tokens.len();

    audit.redis_stock = match cache.stock(sale.product).await {
        Ok(stock) => stock,
        Err(error) => {
            audit
                .violations
                .push(format!("cannot read Redis stock: {error}"));
            return audit;
        }
    };
    let mut flow_tokens = BTreeSet::new();
    let mut cursor = 0;
    loop {
        let page = match cache.scan_flows(sale.product, cursor, 1000).await {
            Ok(page) => page,
            Err(error) => {
                audit.violations.push(format!("cannot scan flows: {error}"));
                return audit;
            }
        };
        for (token, flow) in page.flows {
            audit.flow_units += i64::from(flow.quantity);
            if flow.state == FlowState::Reserved {
                audit.reserved_flows += 1;
            }
            flow_tokens.insert(token.to_string());
        }
        if !page.unreadable.is_empty() {
            audit
                .violations
                .push(format!("unreadable flow records: {:?}", page.unreadable));
        }
        cursor = page.next_cursor;
        if cursor == 0 {
            break;
        }
    }
    audit.flows = flow_tokens.len();

    let mut unconfirmed = Vec::new();
    for token in &accepted {
        let in_mysql = order_status.get(token.as_str()) == Some(&"confirmed");
        let in_redis = match token.parse::<OrderToken>() {
            Ok(parsed) => cache
                .order_view(&parsed)
                .await
                .map(|view| view.confirmed)
                .unwrap_or(false),
            Err(_) => false,
        };
        if in_mysql && in_redis {
            audit.accepted_confirmed += 1;
        } else {
            unconfirmed.push(format!(
                "{token} (MySQL: {}, Redis: {})",
                order_status.get(token.as_str()).unwrap_or(&"no order"),
                if in_redis {
                    "confirmed"
                } else {
                    "not confirmed"
                }
            ));
        }
    }

    let ordered_anyway = ordered_anyway(crowd, &order_status);
    audit.unavailable = crowd.unavailable_tokens().len();
    audit.unavailable_ordered = ordered_anyway.len();

    audit.violations = violations(&audit, &order_status, &stock_flow_tokens, &flow_tokens);
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
            "{} of {} buyers answered 202 have no confirmed order, e.g. {}",
            audit.accepted - audit.accepted_confirmed,
            audit.accepted,
            unconfirmed.join(", ")
        ));
    }
    audit
}

/// The order tokens of purchases answered 503 that have an order row, with its status.
fn ordered_anyway(crowd: &CrowdOutcome, orders: &BTreeMap<&str, &str>) -> Vec<String> {
    crowd
        .unavailable_tokens()
        .into_iter()
        .filter_map(|token| {
            let status = orders.get(token.as_str())?;
            Some(format!("{token} ({status})"))
        })
        .collect()
}

/// The broken promises among the numbers and token sets read.
fn violations(
    audit: &Audit,
    orders: &BTreeMap<&str, &str>,
    stock_flows: &BTreeSet<&str>,
    flows: &BTreeSet<String>,
) -> Vec<String> {
    let mut broken = Vec::new();
    let initial = audit.initial;
    if audit.mysql_initial != Some(initial) {
        broken.push(format!(
            "MySQL says the initial stock is {:?}, the sale put {initial} on sale",
            audit.mysql_initial
        ));
    }
    match audit.redis_stock {
        Some(redis) if audit.order_units != initial - redis => broken.push(format!(
            "{} units ordered in MySQL, {} taken from Redis stock ({initial} − {redis})",
            audit.order_units,
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
    if audit.distinct_stock_flows != audit.stock_flows {
        broken.push(format!(
            "{} stock_flow rows for {} order tokens",
            audit.stock_flows, audit.distinct_stock_flows
        ));
    }
    match audit.mysql_stock {
        Some(stock) if stock + audit.order_units != initial => broken.push(format!(
            "MySQL stock {stock} + {} units ordered ≠ {initial}",
            audit.order_units
        )),
        Some(_) => {}
        None => broken.push("MySQL has no stock row for the product".into()),
    }
    if let Some(redis) = audit.redis_stock
        && redis + audit.flow_units != initial
    {
        broken.push(format!(
            "Redis stock {redis} + {} units in flows ≠ {initial}",
            audit.flow_units
        ));
    }
    if audit.stock_flow_units != audit.order_units {
        broken.push(format!(
            "stock_flow deducts {} units for {} units ordered",
            audit.stock_flow_units, audit.order_units
        ));
    }
    let order_tokens: BTreeSet<&str> = orders.keys().copied().collect();
    let flow_tokens: BTreeSet<&str> = flows.iter().map(String::as_str).collect();
    let sample = |set: BTreeSet<&&str>| -> String {
        set.into_iter()
            .take(5)
            .copied()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let without_flow: BTreeSet<&&str> = order_tokens.difference(&flow_tokens).collect();
    if !without_flow.is_empty() {
        broken.push(format!(
            "{} orders have no flow in Redis, e.g. {}",
            without_flow.len(),
            sample(without_flow)
        ));
    }
    let without_order: BTreeSet<&&str> = flow_tokens.difference(&order_tokens).collect();
    if !without_order.is_empty() {
        broken.push(format!(
            "{} flows have no order in MySQL, e.g. {}",
            without_order.len(),
            sample(without_order)
        ));
    }
    let without_deduction: BTreeSet<&&str> = order_tokens.difference(stock_flows).collect();
    if !without_deduction.is_empty() {
        broken.push(format!(
            "{} orders have no stock_flow row, e.g. {}",
            without_deduction.len(),
            sample(without_deduction)
        ));
    }
    if audit.reserved_flows > 0 {
        broken.push(format!(
            "{} flows are still reserved (their message neither committed nor rolled back)",
            audit.reserved_flows
        ));
    }
    let not_confirmed = orders.values().filter(|s| **s != "confirmed").count();
    if not_confirmed > 0 {
        broken.push(format!("{not_confirmed} orders are not confirmed in MySQL"));
    }
    broken
}
