//! `reconcile-svc --once` as an operator runs it: the real binary, its exit code and its
//! table, on a test's own stack.

use std::process::Output;
use std::time::Duration;

use test_support::process::repo_root;

use crate::helpers::{PRODUCT, STOCK, Sale};

const PAST_GRACE: Duration = Duration::from_millis(1_200);

/// `reconcile-svc --once --product 1 --policy <policy>` with a one-second grace window.
async fn once(sale: &Sale, policy: &str) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_reconcile-svc"))
        .args([
            "--once",
            "--product",
            &PRODUCT.to_string(),
            "--policy",
            policy,
        ])
        .envs(sale.stack.env())
        .env("SECKILL_RECONCILE__GRACE_SECS", "1")
        .env("SECKILL_CONFIG_DIR", repo_root().join("config"))
        .kill_on_drop(true)
        .output()
        .await
        .expect("reconcile-svc runs")
}

fn described(run: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    )
}

#[tokio::test]
async fn once_exits_1_when_the_report_policy_leaves_a_missing_order_unresolved() {
    let sale = Sale::open("1").await;
    sale.reserve(2).await;
    tokio::time::sleep(PAST_GRACE).await;

    let run = once(&sale, "report").await;
    assert_eq!(run.status.code(), Some(1), "{}", described(&run));
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("missing_order"), "{table}");
    assert_eq!(
        sale.redis_stock().await,
        STOCK - 1,
        "a report repairs nothing"
    );
}

#[tokio::test]
async fn once_with_the_restore_policy_gives_the_unit_back_and_exits_0() {
    let sale = Sale::open("1").await;
    sale.reserve(2).await;
    tokio::time::sleep(PAST_GRACE).await;

    let run = once(&sale, "restore").await;
    assert_eq!(run.status.code(), Some(0), "{}", described(&run));
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("missing_order"),
        "{}",
        described(&run)
    );
    assert_eq!(sale.redis_stock().await, STOCK);
    let flows = sale.stack.redis.cache().flow_count(PRODUCT).await.unwrap();
    assert_eq!(flows, 0);

    // Nothing is left for a report to find.
    let again = once(&sale, "report").await;
    assert_eq!(again.status.code(), Some(0), "{}", described(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("0 discrepancies"),
        "{}",
        described(&again)
    );
}
