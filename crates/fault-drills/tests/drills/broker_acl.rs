//! Drill: a broker that checks ACL signatures (rocketmq-rust's `authenticationEnabled`, with
//! one user). Signing with that user's keys (`rocketmq.access_key`, `rocketmq.secret_key`),
//! a sale runs through the gateway, the broker and the consumer and keeps every promise; a
//! gateway signing with a wrong secret, or not signing at all, is refused by the broker, and
//! answers its buyers 503 having given every unit back; signing right again, it sells.

use fault_drills::stack::BrokerSettings;
use fault_drills::{CrowdOutcome, CrowdPlan, Drill, Sale, Service, Settle, settle_and_audit};

use crate::helpers::SETTLE;

const USER: &str = "seckill-drill";
const SECRET: &str = "the-drill-users-secret-0123456789";
const STOCK: i64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_that_checks_signatures_takes_a_signed_sale_and_refuses_the_rest() {
    let mut drill = Drill::begin("broker_acl").await;
    let _broker =
        BrokerSettings::apply(&[("SECKILL_MQ_AUTH_USER", &format!("{USER}:{SECRET}"))]).await;
    drill.set_env("SECKILL_ROCKETMQ__ACCESS_KEY", USER);
    drill.set_env("SECKILL_ROCKETMQ__SECRET_KEY", SECRET);
    drill.start(Service::Gateway).await;
    drill.start(Service::Consumer).await;
    let sale = drill.open_sale(STOCK).await;

    let signed = buy(&drill, &sale, 1, 10).await;
    assert_eq!(signed.accepted().count(), 10, "signed: {signed}");

    restart_gateway(&mut drill, USER, "not-the-users-secret-0123456789").await;
    let wrong_secret = buy(&drill, &sale, 101, 5).await;
    restart_gateway(&mut drill, "", "").await;
    let unsigned = buy(&drill, &sale, 201, 5).await;
    for refused in [&wrong_secret, &unsigned] {
        assert!(
            refused.answers.iter().all(|answer| answer.is_unavailable()),
            "a purchase whose message the broker refuses is answered 503: {refused}"
        );
    }
    // The same gateway, signing right again, sells: the keys made the difference.
    restart_gateway(&mut drill, USER, SECRET).await;
    let signed_again = buy(&drill, &sale, 301, 5).await;
    assert_eq!(signed_again.accepted().count(), 5, "{signed_again}");

    let all = CrowdOutcome {
        answers: [signed, wrong_secret, unsigned, signed_again]
            .into_iter()
            .flat_map(|outcome| outcome.answers)
            .collect(),
    };
    let audit = settle_and_audit(&drill, &sale, &all, Settle::within(SETTLE)).await;
    assert_eq!(audit.orders, 15, "{audit}");
}

/// `buyers` buyers from user `first_user` on, two at a time, each to the end of the purchase.
async fn buy(drill: &Drill, sale: &Sale, first_user: u64, buyers: u32) -> CrowdOutcome {
    let plan = CrowdPlan {
        first_user,
        ..CrowdPlan::rush(buyers, 2)
    };
    drill.crowd(sale, plan).finish().await
}

/// The gateway again, signing with these keys (none when empty).
async fn restart_gateway(drill: &mut Drill, access_key: &str, secret_key: &str) {
    drill.kill(Service::Gateway).await;
    drill
        .start_with(
            Service::Gateway,
            &[
                ("SECKILL_ROCKETMQ__ACCESS_KEY", access_key),
                ("SECKILL_ROCKETMQ__SECRET_KEY", secret_key),
            ],
        )
        .await;
}
