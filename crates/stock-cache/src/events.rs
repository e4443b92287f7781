//! The order events: every status change the lifecycle scripts make is published as
//! `<token> <status>` on the deployment's channel ([`StockCache::events_channel`]); an
//! [`EventSource`] listens to it on a connection of its own.
//!
//! **At most once.** Redis pub/sub keeps nothing: a message published while a subscriber
//! is disconnected (Redis restarting, a fail-over, the connection killed) is lost for it.
//! The stream says when that may have happened ([`OrderEvent::Resubscribed`]), but not
//! what was missed, so a subscriber must re-read the state it cares about then, and also
//! periodically: a message can be lost without any reconnect it could see (a publisher
//! writing just before Redis lost its data, for instance).

use std::time::Duration;

use deadpool_redis::redis::aio::{PubSubSink, PubSubStream};
use deadpool_redis::redis::{self, Msg, Value};
use domain::{OrderStatus, OrderToken};
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::{StockCache, Topology};

/// One message of the events channel, or news about the subscription itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderEvent {
    /// The order's status changed to `status` (its new status when published; a reader may
    /// find a later one already).
    Changed {
        token: OrderToken,
        status: OrderStatus,
    },
    /// The subscription was (re)made and is live: yielded when it is first made and after
    /// every reconnect. Anything published before it may have been missed, so whoever
    /// follows orders re-reads them.
    Resubscribed,
}

impl OrderEvent {
    /// A payload of the channel, `<token> <status>`; None for anything else.
    pub fn parse(payload: &str) -> Option<Self> {
        let (token, status) = payload.split_once(' ')?;
        Some(Self::Changed {
            token: token.parse().ok()?,
            status: status.parse().ok()?,
        })
    }
}

/// Where a process reads the order events of its deployment: each
/// [`EventSource::subscribe`] opens a pub/sub connection of its own and keeps it open,
/// reconnecting when it is lost. Cheap to clone.
#[derive(Clone)]
pub struct EventSource {
    /// Where to subscribe; it may carry a password: never printed.
    topology: Topology,
    channel: String,
    /// How long connecting and subscribing, or a health-check PING, may take.
    timeout: Duration,
}

impl std::fmt::Debug for EventSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSource")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl StockCache {
    /// The order events of this cache's deployment (its key prefix), on the same Redis.
    pub fn event_source(&self) -> EventSource {
        EventSource {
            topology: self.topology.clone(),
            channel: self.events_channel(),
            timeout: self.timeout,
        }
    }
}

/// Between reconnects: short at first, so a killed connection costs a blink; longer while
/// Redis stays away, so a subscriber does not hammer a server that is coming back.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A subscription that lasted this long was healthy: the next loss starts from
/// [`FIRST_BACKOFF`] again. Shorter ones keep backing off, so a server that accepts and
/// then drops every connection does not make a reconnect (and a `Resubscribed`) loop.
const HEALTHY_AFTER: Duration = Duration::from_secs(1);
/// A subscriber only reads: a connection a fail-over left half-open would look idle
/// forever. A PING this often tells it apart.
const PING_EVERY: Duration = Duration::from_secs(5);

impl EventSource {
    /// The channel listened to.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The events, for as long as the stream is polled: it never ends. It connects on first
    /// poll, yields [`OrderEvent::Resubscribed`] once subscribed, and after a lost
    /// connection reconnects with a short backoff and yields it again. Malformed payloads
    /// are skipped. See the module docs: messages published while it was not subscribed
    /// are lost, so its reader must also re-read state periodically.
    pub fn subscribe(&self) -> impl Stream<Item = OrderEvent> + Send + 'static {
        let subscriber = Subscriber {
            source: self.clone(),
            live: None,
            backoff: Duration::ZERO,
        };
        futures::stream::unfold(subscriber, |mut subscriber| async move {
            let event = subscriber.next_event().await;
            Some((event, subscriber))
        })
    }
}

struct Subscriber {
    source: EventSource,
    live: Option<Live>,
    /// How long to wait before the next connection attempt.
    backoff: Duration,
}

struct Live {
    sink: PubSubSink,
    messages: PubSubStream,
    since: Instant,
    next_ping: Instant,
}

enum Step {
    Message(Msg),
    Lost,
    PingDue,
}

impl Subscriber {
    async fn next_event(&mut self) -> OrderEvent {
        loop {
            let Some(live) = self.live.as_mut() else {
                tokio::time::sleep(self.backoff).await;
                match self.connect().await {
                    Ok(live) => {
                        tracing::debug!(channel = %self.source.channel, "Subscribed to the order events.");
                        self.live = Some(live);
                        return OrderEvent::Resubscribed;
                    }
                    Err(error) => {
                        let retry_in = self.next_backoff();
                        tracing::warn!(channel = %self.source.channel, error = %error, retry_in = ?retry_in, "Cannot subscribe to the order events.");
                        continue;
                    }
                }
            };
            let step = tokio::select! {
                message = live.messages.next() => message.map_or(Step::Lost, Step::Message),
                () = tokio::time::sleep_until(live.next_ping) => Step::PingDue,
            };
            match step {
                Step::Message(message) => {
                    if let Some(event) = event_of(&message) {
                        return event;
                    }
                }
                Step::PingDue => {
                    let pong =
                        tokio::time::timeout(self.source.timeout, live.sink.ping::<Value>()).await;
                    if matches!(pong, Ok(Ok(_))) {
                        live.next_ping = Instant::now() + PING_EVERY;
                    } else {
                        self.lost("it did not answer a PING");
                    }
                }
                Step::Lost => self.lost("the connection closed"),
            }
        }
    }

    /// Forgets the connection; the next attempt waits the backoff, which restarts from
    /// [`FIRST_BACKOFF`] after a healthy subscription.
    fn lost(&mut self, why: &str) {
        if let Some(live) = self.live.take()
            && live.since.elapsed() >= HEALTHY_AFTER
        {
            self.backoff = Duration::ZERO;
        }
        let retry_in = self.next_backoff();
        tracing::warn!(channel = %self.source.channel, retry_in = ?retry_in, "Lost the order events subscription: {why}.");
    }

    /// Moves the backoff one step and returns it.
    fn next_backoff(&mut self) -> Duration {
        self.backoff = (self.backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        self.backoff
    }

    async fn connect(&self) -> redis::RedisResult<Live> {
        let subscribe = async {
            let (mut sink, messages) = self.source.topology.subscriber().await?.split();
            sink.subscribe(&self.source.channel).await?;
            let now = Instant::now();
            Ok(Live {
                sink,
                messages,
                since: now,
                next_ping: now + PING_EVERY,
            })
        };
        tokio::time::timeout(self.source.timeout, subscribe)
            .await
            .unwrap_or_else(|_| {
                Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "subscribing timed out",
                )))
            })
    }
}

/// The event a message carries, or None (logged) for a payload that is not one.
fn event_of(message: &Msg) -> Option<OrderEvent> {
    let payload: String = message.get_payload().ok()?;
    let event = OrderEvent::parse(&payload);
    if event.is_none() {
        // Not ours to act on; at debug, so that a stray publisher cannot flood the log.
        tracing::debug!(payload = %payload.chars().take(100).collect::<String>(), "Skipped a malformed order event.");
    }
    event
}

#[cfg(test)]
mod tests {
    use domain::ProductId;

    use super::*;

    #[test]
    fn a_payload_of_a_token_and_a_status_is_a_change() {
        let token = OrderToken::random(ProductId(7));
        assert_eq!(
            OrderEvent::parse(&format!("{token} cancelled")),
            Some(OrderEvent::Changed {
                token,
                status: OrderStatus::Cancelled
            })
        );
    }

    #[test]
    fn anything_else_is_no_event() {
        let token = OrderToken::random(ProductId(7));
        for payload in [
            String::new(),
            token.to_string(),
            format!("{token} shipped"),
            format!("{token}  paid"),
            String::from("not-a-token paid"),
            format!("{token} paid extra"),
        ] {
            assert_eq!(OrderEvent::parse(&payload), None, "{payload:?}");
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let cache = StockCache::new("redis://127.0.0.1:1", 1, "sk", Duration::from_secs(1))
            .expect("a cache needs no server to be built");
        let mut subscriber = Subscriber {
            source: cache.event_source(),
            live: None,
            backoff: Duration::ZERO,
        };
        assert_eq!(subscriber.next_backoff(), FIRST_BACKOFF);
        assert_eq!(subscriber.next_backoff(), FIRST_BACKOFF * 2);
        for _ in 0..20 {
            subscriber.next_backoff();
        }
        assert_eq!(subscriber.backoff, MAX_BACKOFF);
    }
}
