use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use domain::{OrderToken, ProductId};
use order_queue::{
    Deadline, DeadlinePublisher, DeadlineSubscriber, DeadlineTuning, Due, MqRuntime, MqSettings,
};
use rocketmq_client_rust::{
    ClientRuntime, ClientRuntimeConfig, DefaultMQProducer, TelemetryHandle,
};
use rocketmq_model::common::message::message_single::Message;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use crate::helpers::{WAIT, settings};

/// How late after `pay_by` a deadline may arrive and still count as on time: the broker's
/// timer ticks once a second, and the consumer's pull adds a little.
const LATENESS: Duration = Duration::from_secs(3);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn deadline_in(ms: i64) -> Deadline {
    let product = ProductId(42);
    Deadline::new(
        product,
        vec![OrderToken::random(product), OrderToken::random(product)],
        now_ms() + ms,
    )
}

/// Records each deadline with the wall-clock time it arrived; answers `RetryLater` the first
/// time it sees one listed in `retry_once`.
#[derive(Default)]
struct Expirer {
    seen: Mutex<Vec<(Deadline, i64)>>,
    retry_once: Mutex<Vec<Deadline>>,
}

impl Expirer {
    fn arrivals_of(&self, deadline: &Deadline) -> Vec<i64> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(d, _)| d == deadline)
            .map(|(_, at)| *at)
            .collect()
    }

    async fn wait_for(&self, deadline: &Deadline, count: usize, what: &str) -> Vec<i64> {
        let started = Instant::now();
        loop {
            let arrivals = self.arrivals_of(deadline);
            if arrivals.len() >= count {
                return arrivals;
            }
            assert!(
                started.elapsed() < WAIT,
                "{what}: delivered {} time(s) in {WAIT:?}, expected {count}",
                arrivals.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn handle(&self, deadline: Deadline) -> Due {
        let at = now_ms();
        let mut retry = self.retry_once.lock().unwrap();
        let due = match retry.iter().position(|d| *d == deadline) {
            Some(i) => {
                retry.remove(i);
                Due::RetryLater
            }
            None => Due::Done,
        };
        self.seen.lock().unwrap().push((deadline, at));
        due
    }
}

/// One test's runtime, deadline publisher and subscriber.
struct Deadlines {
    settings: MqSettings,
    expirer: Arc<Expirer>,
    publisher: DeadlinePublisher,
    subscriber: DeadlineSubscriber,
    runtime: MqRuntime,
}

impl Deadlines {
    async fn start(test: &str) -> Self {
        let settings = settings(test);
        let runtime = MqRuntime::new(&format!("oq-{test}"), 4).expect("runtime builds");
        let publisher = DeadlinePublisher::start(&runtime, &settings)
            .await
            .expect("deadline publisher starts");
        let expirer = Arc::new(Expirer::default());
        let handling = Arc::clone(&expirer);
        let handler = move |deadline: Deadline| {
            let expirer = Arc::clone(&handling);
            async move { expirer.handle(deadline) }
        };
        let subscriber =
            DeadlineSubscriber::start(&runtime, &settings, DeadlineTuning::default(), handler)
                .await
                .expect("deadline subscriber starts");
        Self {
            settings,
            expirer,
            publisher,
            subscriber,
            runtime,
        }
    }

    async fn shutdown(self) {
        self.publisher.shutdown().await;
        self.subscriber.shutdown().await;
        self.runtime.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_three_seconds_ahead_arrives_not_before_its_time_and_soon_after() {
    let deadlines = Deadlines::start("deadline-timer").await;
    let deadline = deadline_in(3_000);
    deadlines
        .publisher
        .schedule(&deadline)
        .await
        .expect("deadline stored");

    let arrived = deadlines
        .expirer
        .wait_for(&deadline, 1, "due deadline")
        .await[0];
    let late = arrived - deadline.pay_by_ms;
    eprintln!("[deadline-timer] arrived {late} ms after pay_by");
    assert!(late >= 0, "arrived {} ms before pay_by", -late);
    assert!(
        late <= LATENESS.as_millis() as i64,
        "arrived {late} ms after pay_by"
    );

    deadlines.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_already_past_arrives_at_once() {
    let deadlines = Deadlines::start("deadline-past").await;
    let deadline = deadline_in(-60_000);
    let sent = now_ms();
    deadlines
        .publisher
        .schedule(&deadline)
        .await
        .expect("deadline stored");

    let arrived = deadlines
        .expirer
        .wait_for(&deadline, 1, "past deadline")
        .await[0];
    eprintln!(
        "[deadline-past] arrived {} ms after sending",
        arrived - sent
    );
    assert!(
        arrived - sent <= LATENESS.as_millis() as i64,
        "a past deadline took {} ms",
        arrived - sent
    );

    deadlines.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_answered_retry_later_is_delivered_again() {
    let deadlines = Deadlines::start("deadline-retry").await;
    let deadline = deadline_in(1_000);
    deadlines
        .expirer
        .retry_once
        .lock()
        .unwrap()
        .push(deadline.clone());
    deadlines
        .publisher
        .schedule(&deadline)
        .await
        .expect("deadline stored");

    let arrivals = deadlines
        .expirer
        .wait_for(&deadline, 2, "redelivery after RetryLater")
        .await;
    eprintln!(
        "[deadline-retry] redelivered {} ms after the first delivery",
        arrivals[1] - arrivals[0]
    );

    deadlines.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_deadline_never_reaches_the_handler_nor_holds_up_the_next() {
    let deadlines = Deadlines::start("deadline-malformed").await;
    send_raw(&deadlines.settings, b"{\"v\":1,\"pay_by_ms\":\"soon\"}").await;
    let deadline = deadline_in(-1);
    deadlines
        .publisher
        .schedule(&deadline)
        .await
        .expect("deadline stored");

    deadlines
        .expirer
        .wait_for(&deadline, 1, "deadline after a malformed one")
        .await;
    // That the malformed one is acknowledged rather than sent back for retry is the
    // listener's unit test; here, it never reaches the handler and blocks nothing.
    let seen = deadlines.expirer.seen.lock().unwrap().len();
    assert_eq!(
        seen, 1,
        "the handler saw something besides the good deadline"
    );

    deadlines.shutdown().await;
}

/// Sends `body` to the deadline topic as a plain message with the deadline tag, through a
/// client of its own (the crate sends only well-formed deadlines).
async fn send_raw(settings: &MqSettings, body: &[u8]) {
    let owner = RuntimeOwner::plan(RuntimeConfig::for_parallelism("oq-raw", 2))
        .expect("runtime plan")
        .build()
        .expect("runtime builds");
    let client = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        TelemetryHandle::noop(),
    )
    .expect("client runtime builds");
    let mut producer = DefaultMQProducer::builder(Arc::clone(&client))
        .producer_group(format!("{}-raw", settings.producer_group).as_str())
        .name_server_addr(settings.name_server.as_str())
        .send_msg_timeout(5_000)
        .build();
    producer.start().await.expect("raw producer starts");
    let message = Message::builder()
        .topic(settings.deadline_topic.as_str())
        .tags(order_queue::deadline::DEADLINE_TAG)
        .body(body.to_vec())
        .build()
        .unwrap();
    producer.send(message).await.expect("raw message stored");
    producer.shutdown().await;
    let _report = client.shutdown().await;
    drop(client);
    let _report = owner.shutdown_background();
}
