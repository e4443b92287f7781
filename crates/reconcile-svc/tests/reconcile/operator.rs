//! What an operator does by hand: dry runs, single repairs, reading reports.

use std::time::Duration;

use reconcile_svc::report::Outcome;
use reconcile_svc::{Application, ManualAction, Policy};
use test_support::service::InProcessService;

use crate::helpers::{STOCK, Sale, dry_run, findings, reconcile, repair};

const PAST_GRACE: Duration = Duration::from_millis(1_200);

#[tokio::test]
async fn a_dry_run_says_what_it_would_repair_and_changes_nothing() {
    let sale = Sale::open("1").await;
    sale.reserve(2).await;
    tokio::time::sleep(PAST_GRACE).await;

    let planned = dry_run(sale.settings(), Policy::Restore).await.unwrap();
    assert_eq!(
        findings(&planned),
        [("missing_order", Outcome::WouldRepair)]
    );
    assert_eq!(planned.unresolved(), 1);
    assert_eq!(sale.redis_stock().await, STOCK - 1);

    let done = reconcile(sale.settings(), Policy::Restore).await.unwrap();
    assert_eq!(findings(&done), [("missing_order", Outcome::Repaired)]);
}

#[tokio::test]
async fn a_manual_release_puts_a_reserved_unit_back_and_is_recorded() {
    let sale = Sale::open("600").await;
    let token = sale.reserve(2).await;

    let finding = repair(sale.settings(), token.clone(), ManualAction::Release)
        .await
        .unwrap();
    assert_eq!(finding.outcome, Outcome::Repaired);
    assert_eq!(sale.redis_stock().await, STOCK);
    let run = sale.stack.db.db().latest_run().await.unwrap().unwrap();
    assert_eq!(run.policy, "manual");
    assert!(run.report.unwrap().contains(&token.to_string()));

    // Once released, there is nothing left to release.
    let again = repair(sale.settings(), token, ManualAction::Release).await;
    assert!(again.is_err());
}

#[tokio::test]
async fn a_manual_release_of_a_committed_flow_is_refused() {
    let sale = Sale::open("600").await;
    let token = sale.sell(2).await;
    let finding = repair(sale.settings(), token, ManualAction::Release)
        .await
        .unwrap();
    assert_eq!(finding.outcome, Outcome::Unresolved);
    assert_eq!(sale.redis_stock().await, STOCK - 1);
}

#[tokio::test]
async fn a_manual_deduct_needs_an_order_and_happens_once() {
    let sale = Sale::open("600").await;
    let reserved_only = sale.reserve(2).await;
    assert!(
        repair(sale.settings(), reserved_only, ManualAction::Deduct)
            .await
            .is_err()
    );

    let token = sale.sell(3).await;
    sale.sql(&format!(
        "DELETE FROM stock_flow WHERE order_token = '{token}'"
    ))
    .await;
    sale.sql("UPDATE product_stock SET stock = stock + 1").await;
    let first = repair(sale.settings(), token.clone(), ManualAction::Deduct)
        .await
        .unwrap();
    assert_eq!(first.outcome, Outcome::Repaired);
    let second = repair(sale.settings(), token, ManualAction::Deduct)
        .await
        .unwrap();
    assert_eq!(second.outcome, Outcome::AlreadySettled);
    // One order in MySQL (the other unit is only reserved in Redis), deducted once.
    assert_eq!(sale.mysql_stock().await, STOCK - 1);
}

#[tokio::test]
async fn the_latest_report_is_served_to_the_admin_only() {
    let sale = Sale::open("600").await;
    let port = test_support::process::free_port();
    let listen = format!("127.0.0.1:{port}");
    let settings = sale.settings_with(&[("SECKILL_RECONCILE__LISTEN", &listen)]);
    let _daemon = InProcessService::start("reconcile", move |shutdown, sender| async move {
        let app = Application::build(settings, None, false).await?;
        let _ = sender.send(port);
        app.run_daemon(shutdown).await
    })
    .await;
    let url = format!("http://127.0.0.1:{port}/api/v1/reconcile/runs/latest");
    let client = reqwest::Client::new();
    let wait_up = async {
        for _ in 0..100 {
            if client.get(&url).send().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the daemon never answered");
    };
    wait_up.await;

    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let before = client
        .get(&url)
        .bearer_auth("dev-admin-token")
        .send()
        .await
        .unwrap();
    assert_eq!(before.status(), 404);

    let report = reconcile(sale.settings(), Policy::Republish).await.unwrap();
    let latest: serde_json::Value = client
        .get(&url)
        .bearer_auth("dev-admin-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(latest["run_id"], report.run_id);
    assert_eq!(latest["status"], "clean");
}
