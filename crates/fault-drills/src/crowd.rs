//! The drills' buyers: each asks the gateway for a purchase token, then buys one unit, and
//! every answer is kept — above all who was answered 202 and with which order token, which
//! is what [`crate::audit`] holds the system to.
//!
//! Not `sale-sim`: its report counts the accepted purchases but does not say which, and it
//! needs the gateway for the whole sale (it puts the product on sale and polls it through
//! the admin API), where drills stop and restart the gateway mid-sale.
//!
//! Every request opens a connection of its own (no keep-alive). A gateway that stops
//! accepting then shows as a refused connection, and a request cut off after the gateway
//! took it as a missing answer — two different things a drill must tell apart, which a
//! reused idle connection would blur.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use domain::ProductId;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The outcome key of a purchase answered 202.
pub const ACCEPTED: &str = "ACCEPTED";
/// [`Reply::Refused`] in [`CrowdOutcome::codes`].
pub const REFUSED: &str = "REFUSED";
/// [`Reply::Cut`] in [`CrowdOutcome::codes`].
pub const CUT: &str = "CUT";

/// Who buys and how fast.
#[derive(Debug, Clone)]
pub struct CrowdPlan {
    /// User ids `first_user .. first_user + buyers`, one unit each.
    pub buyers: u32,
    pub first_user: u64,
    /// Buyers started per second: a steady stream, so that a fault lands in the middle of
    /// the sale. `None`: all at once, as far as `concurrency` lets them.
    pub per_sec: Option<f64>,
    /// Buyers in flight at once.
    pub concurrency: usize,
    /// Every buyer's token first, as fast as `concurrency` allows, and only then the
    /// purchases at `per_sec`: a fault during the sale then meets purchases, never the token
    /// requests before them.
    pub tokens_first: bool,
}

impl CrowdPlan {
    /// `buyers` buyers arriving at `per_sec` a second, at most 16 in flight.
    pub fn steady(buyers: u32, per_sec: f64) -> Self {
        Self {
            buyers,
            first_user: 1,
            per_sec: Some(per_sec),
            concurrency: 16,
            tokens_first: false,
        }
    }

    /// `buyers` buyers as fast as `concurrency` in flight allows.
    pub fn rush(buyers: u32, concurrency: usize) -> Self {
        Self {
            buyers,
            first_user: 1,
            per_sec: None,
            concurrency,
            tokens_first: false,
        }
    }

    /// The same buyers, holding their tokens before the first purchase goes out.
    pub fn tokens_first(self) -> Self {
        Self {
            tokens_first: true,
            ..self
        }
    }
}

/// Which request ended a buyer's attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Token,
    Purchase,
}

/// What came back for a buyer's last request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An HTTP answer. `code` is the API's error code, `ACCEPTED` for a 202 (which carries
    /// the order token), or `HTTP_<status>` for a body without one.
    Http {
        status: u16,
        code: String,
        order_token: Option<String>,
    },
    /// The connection was refused: nobody was accepting (a gateway stopped or restarting).
    /// The request never reached a gateway.
    Refused,
    /// The request went out and no answer came back (reset, closed, timed out): the buyer
    /// cannot know what happened.
    Cut(String),
}

/// One buyer's attempt.
#[derive(Debug, Clone)]
pub struct Answer {
    pub user: u64,
    pub step: Step,
    pub reply: Reply,
    /// The order token the purchase was for (named by its purchase token), whatever the
    /// answer: a purchase refused must leave no order under it. `None` when no purchase
    /// was sent.
    pub order_token_sent: Option<String>,
    /// When the last request went out and when its answer came, from the crowd's start.
    pub sent: Duration,
    pub answered: Duration,
}

impl Answer {
    /// The order token of a purchase answered 202.
    pub fn order_token(&self) -> Option<&str> {
        match &self.reply {
            Reply::Http {
                status: 202,
                order_token,
                ..
            } => order_token.as_deref(),
            _ => None,
        }
    }

    pub fn is_accepted(&self) -> bool {
        self.order_token().is_some()
    }

    /// `ACCEPTED`, the API's error code, [`REFUSED`] or [`CUT`].
    pub fn code(&self) -> &str {
        match &self.reply {
            Reply::Http { code, .. } => code,
            Reply::Refused => REFUSED,
            Reply::Cut(_) => CUT,
        }
    }

    /// A 5xx: the gateway failed the buyer rather than answered the sale.
    pub fn is_server_error(&self) -> bool {
        matches!(self.reply, Reply::Http { status, .. } if status >= 500)
    }

    /// A purchase answered 503 UNAVAILABLE: the API's promise is that it holds no order.
    pub fn is_unavailable(&self) -> bool {
        self.step == Step::Purchase && matches!(self.reply, Reply::Http { status: 503, .. })
    }
}

/// The order token a purchase token names: the first field of its payload
/// (`v1.<key id>.<payload>.<signature>`, the payload URL-safe base64 of
/// `<order token>:…`). Read without verifying: the crowd only needs to know which order a
/// purchase was for.
pub fn order_token_of(purchase_token: &str) -> Option<String> {
    use base64::Engine as _;
    let payload = purchase_token.split('.').nth(2)?;
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split(':').next().map(str::to_owned)
}

/// A crowd on its way; the buyers run on tasks of their own.
pub struct Crowd {
    started: Instant,
    answers: Arc<Mutex<Vec<Answer>>>,
    buyers: u32,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for Crowd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Crowd")
            .field("buyers", &self.buyers)
            .field("answered", &self.answered())
            .finish_non_exhaustive()
    }
}

impl Crowd {
    /// Sends the crowd at `product` on the gateway at `gateway` (base URL).
    pub fn start(gateway: String, product: ProductId, plan: CrowdPlan) -> Self {
        let client = buyer_client();
        let started = Instant::now();
        let answers = Arc::new(Mutex::new(Vec::with_capacity(plan.buyers as usize)));
        let shared = Arc::clone(&answers);
        let buyers = plan.buyers;
        let task = tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(plan.concurrency.max(1)));
            let users = (0..plan.buyers).map(|n| plan.first_user + u64::from(n));
            // Who buys, and the token each holds already (none: it asks for one first).
            let buyers: Vec<(u64, Option<String>)> = if plan.tokens_first {
                issue_all(&client, &gateway, product, started, users, &slots, &shared).await
            } else {
                users.map(|user| (user, None)).collect()
            };
            let purchases_started = Instant::now();
            let mut running = JoinSet::new();
            for (n, (user, token)) in (0u32..).zip(buyers) {
                if let Some(per_sec) = plan.per_sec {
                    let due = purchases_started + Duration::from_secs_f64(f64::from(n) / per_sec);
                    tokio::time::sleep_until(due.into()).await;
                }
                let slot = Arc::clone(&slots)
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed");
                let (client, gateway, shared) = (client.clone(), gateway.clone(), shared.clone());
                running.spawn(async move {
                    let answer = match token {
                        Some(token) => {
                            purchase(&client, &gateway, product, user, &token, started).await
                        }
                        None => buy(&client, &gateway, product, user, started).await,
                    };
                    shared.lock().expect("never poisoned").push(answer);
                    drop(slot);
                });
            }
            while running.join_next().await.is_some() {}
        });
        Self {
            started,
            answers,
            buyers,
            task,
        }
    }

    /// Since the crowd started: the clock of [`Answer::sent`] and [`Answer::answered`].
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn answered(&self) -> usize {
        self.answers.lock().expect("never poisoned").len()
    }

    pub fn accepted(&self) -> usize {
        self.answers
            .lock()
            .expect("never poisoned")
            .iter()
            .filter(|a| a.is_accepted())
            .count()
    }

    /// Waits until at least `n` purchases were answered 202. Panics after `within`.
    pub async fn until_accepted(&self, n: usize, within: Duration) {
        crate::eventually(within, &format!("{n} purchases accepted"), || async {
            (self.accepted() >= n).then_some(())
        })
        .await;
    }

    /// Waits for every buyer's answer.
    pub async fn finish(self) -> CrowdOutcome {
        self.task.await.expect("the crowd's task does not panic");
        let mut answers = std::mem::take(&mut *self.answers.lock().expect("never poisoned"));
        answers.sort_by_key(|a| a.user);
        CrowdOutcome { answers }
    }
}

/// The HTTP client of the crowd's buyers: a connection per request (see the module docs).
fn buyer_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        // A proxy from the environment would sit between us and a local gateway.
        .no_proxy()
        .build()
        .expect("an HTTP client")
}

/// `user`'s purchase token for `product`, asked for as a crowd's buyer asks, for a drill
/// that sends the purchase itself; or the answer that refused it.
pub async fn purchase_token(
    gateway: &str,
    product: ProductId,
    user: u64,
) -> Result<String, Answer> {
    issue_token(&buyer_client(), gateway, product, user, Instant::now()).await
}

/// Every user's token, `slots` at a time. A user refused a token is answered at once (its
/// answer recorded in `answers`) and is left out of what comes back.
async fn issue_all(
    client: &reqwest::Client,
    gateway: &str,
    product: ProductId,
    started: Instant,
    users: impl Iterator<Item = u64>,
    slots: &Arc<Semaphore>,
    answers: &Arc<Mutex<Vec<Answer>>>,
) -> Vec<(u64, Option<String>)> {
    let mut issuing = JoinSet::new();
    for user in users {
        let slot = Arc::clone(slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (client, gateway) = (client.clone(), gateway.to_owned());
        issuing.spawn(async move {
            let issued = issue_token(&client, &gateway, product, user, started).await;
            drop(slot);
            (user, issued)
        });
    }
    let mut holding = Vec::new();
    while let Some(joined) = issuing.join_next().await {
        match joined.expect("a token request does not panic") {
            (user, Ok(token)) => holding.push((user, Some(token))),
            (_, Err(refused)) => answers.lock().expect("never poisoned").push(refused),
        }
    }
    holding.sort_by_key(|(user, _)| *user);
    holding
}

async fn buy(
    client: &reqwest::Client,
    gateway: &str,
    product: ProductId,
    user: u64,
    started: Instant,
) -> Answer {
    match issue_token(client, gateway, product, user, started).await {
        Ok(token) => purchase(client, gateway, product, user, &token, started).await,
        Err(refused) => refused,
    }
}

/// The buyer's purchase token, or the answer that refused it.
async fn issue_token(
    client: &reqwest::Client,
    gateway: &str,
    product: ProductId,
    user: u64,
    started: Instant,
) -> Result<String, Answer> {
    let sent = started.elapsed();
    let token = client
        .post(format!("{gateway}/api/v1/products/{product}/tokens"))
        .header("X-User-Id", user)
        .send()
        .await;
    let token = match read(token).await {
        (Reply::Http { status: 201, .. }, Some(body)) => body["token"].as_str().map(str::to_owned),
        (reply, _) => {
            return Err(Answer {
                user,
                step: Step::Token,
                reply,
                order_token_sent: None,
                sent,
                answered: started.elapsed(),
            });
        }
    };
    token.ok_or_else(|| Answer {
        user,
        step: Step::Token,
        reply: Reply::Http {
            status: 201,
            code: "BAD_RESPONSE".into(),
            order_token: None,
        },
        order_token_sent: None,
        sent,
        answered: started.elapsed(),
    })
}

async fn purchase(
    client: &reqwest::Client,
    gateway: &str,
    product: ProductId,
    user: u64,
    token: &str,
    started: Instant,
) -> Answer {
    let sent = started.elapsed();
    let purchase = client
        .post(format!("{gateway}/api/v1/products/{product}/purchase"))
        .header("X-User-Id", user)
        .json(&json!({"token": token, "quantity": 1}))
        .send()
        .await;
    let (reply, _) = read(purchase).await;
    Answer {
        user,
        step: Step::Purchase,
        reply,
        order_token_sent: order_token_of(token),
        sent,
        answered: started.elapsed(),
    }
}

/// The reply, and the JSON body when there is one.
async fn read(
    response: Result<reqwest::Response, reqwest::Error>,
) -> (Reply, Option<serde_json::Value>) {
    let response = match response {
        Ok(response) => response,
        Err(error) if error.is_connect() => return (Reply::Refused, None),
        Err(error) => return (Reply::Cut(chain(&error)), None),
    };
    let status = response.status().as_u16();
    let body: Option<serde_json::Value> = match response.bytes().await {
        Ok(bytes) => serde_json::from_slice(&bytes).ok(),
        Err(error) => return (Reply::Cut(chain(&error)), None),
    };
    let order_token = (status == 202)
        .then(|| body.as_ref()?["order_token"].as_str().map(str::to_owned))
        .flatten();
    let code = match (&body, status) {
        (_, 202) if order_token.is_some() => ACCEPTED.to_owned(),
        (Some(body), _) if body["error"]["code"].is_string() => body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        _ => format!("HTTP_{status}"),
    };
    (
        Reply::Http {
            status,
            code,
            order_token,
        },
        body,
    )
}

/// reqwest's top-level message hides the cause ("error sending request"); say it all.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Every buyer's answer, by user id.
#[derive(Debug, Clone, Default)]
pub struct CrowdOutcome {
    pub answers: Vec<Answer>,
}

impl CrowdOutcome {
    /// The buyers answered 202.
    pub fn accepted(&self) -> impl Iterator<Item = &Answer> {
        self.answers.iter().filter(|a| a.is_accepted())
    }

    /// The order tokens of the purchases answered 202.
    pub fn accepted_tokens(&self) -> Vec<String> {
        self.accepted()
            .filter_map(|a| a.order_token().map(str::to_owned))
            .collect()
    }

    /// How many buyers ended with each code.
    pub fn codes(&self) -> BTreeMap<String, usize> {
        let mut codes = BTreeMap::new();
        for answer in &self.answers {
            *codes.entry(answer.code().to_owned()).or_default() += 1;
        }
        codes
    }

    /// Purchases answered 202 whose request went out at or after `from` and was answered
    /// before `to` (crowd clock).
    pub fn accepted_within(&self, from: Duration, to: Duration) -> usize {
        self.accepted()
            .filter(|a| a.sent >= from && a.answered < to)
            .count()
    }

    /// The order tokens of the purchases answered 503 UNAVAILABLE.
    pub fn unavailable_tokens(&self) -> Vec<String> {
        self.answers
            .iter()
            .filter(|a| a.is_unavailable())
            .filter_map(|a| a.order_token_sent.clone())
            .collect()
    }

    /// Buyers whose last request was answered with a 5xx.
    pub fn server_errors(&self) -> Vec<&Answer> {
        self.answers
            .iter()
            .filter(|a| a.is_server_error())
            .collect()
    }
}

impl fmt::Display for CrowdOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} buyers:", self.answers.len())?;
        for (code, count) in self.codes() {
            write!(f, " {code} {count}")?;
        }
        Ok(())
    }
}
