//! The three services as processes, a crowd on a little stock, and the promises checked
//! through the API and the database.

use std::time::Duration;

use diesel::sql_types::BigInt;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use sale_sim::{SaleConfig, run_sale};
use test_support::process::{ServiceProcess, bin_dir, repo_root};
use test_support::stack::TestStack;

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(url: &str, sql: &str) -> i64 {
    let mut conn = AsyncMysqlConnection::establish(url).await.unwrap();
    diesel::sql_query(sql)
        .get_result::<Count>(&mut conn)
        .await
        .unwrap()
        .n
}

#[tokio::test]
async fn three_services_sell_exactly_100_units_to_2000_concurrent_buyers() {
    let stack = TestStack::new().await;
    let env = stack.env();
    let gateway = ServiceProcess::start("gateway-svc", "SECKILL_GATEWAY__LISTEN", &env, &[]).await;
    let consumer =
        ServiceProcess::start("order-consumer-svc", "SECKILL_CONSUMER__LISTEN", &env, &[]).await;
    let reconciler =
        ServiceProcess::start("reconcile-svc", "SECKILL_RECONCILE__LISTEN", &env, &[]).await;

    let mut sale = SaleConfig::new(42);
    sale.gateway = gateway.url();
    sale.stock = 100;
    sale.buyers = 2_000;
    sale.concurrency = 200;
    sale.per_user_limit = 1;
    sale.progress = false;
    sale.drain_timeout = Duration::from_secs(90);
    let report = run_sale(&sale).await.expect("the sale runs");

    assert_eq!(report.accepted, 100, "{report:?}");
    assert_eq!(report.outcomes.get("SOLD_OUT"), Some(&1_900), "{report:?}");
    assert_eq!(report.orders_in_mysql, 100);
    assert_eq!(report.redis_stock, Some(0));
    assert_eq!(report.mysql_stock, Some(0));
    assert!(report.violations.is_empty(), "{:?}", report.violations);

    let url = stack.db.url();
    assert_eq!(count(url, "SELECT COUNT(*) AS n FROM orders").await, 100);
    assert_eq!(
        count(url, "SELECT COUNT(DISTINCT order_token) AS n FROM orders").await,
        100
    );
    assert_eq!(
        count(
            url,
            "SELECT COUNT(*) AS n FROM (SELECT user_id FROM orders GROUP BY user_id \
             HAVING SUM(quantity) > 1) AS over_limit"
        )
        .await,
        0,
        "nobody holds more than the per-user limit"
    );
    assert_eq!(
        count(url, "SELECT COUNT(*) AS n FROM stock_flow").await,
        100
    );

    let audit = tokio::process::Command::new(bin_dir().join("reconcile-svc"))
        .arg("--once")
        .envs(&env)
        .env("SECKILL_CONFIG_DIR", repo_root().join("config"))
        .output()
        .await
        .expect("reconcile-svc runs");
    let table = String::from_utf8_lossy(&audit.stdout);
    assert!(
        audit.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    assert!(table.contains("0 discrepancies"), "{table}");

    for service in [gateway, consumer, reconciler] {
        let name = service.name;
        let status = service.terminate().await;
        assert!(
            status.success(),
            "{name} did not exit cleanly on SIGTERM: {status}"
        );
    }
}
