//! Who is watching which order on this gateway, and the wake-up when it changes.
//!
//! Every status change, on whichever process makes it (the consumer confirming, a gateway
//! taking a payment or a cancel, the expirer), is published on one Redis channel. Each
//! gateway listens once ([`OrderWatch::follow`]) and wakes only the event streams and
//! long-polls of that order held here; they then read the order again and tell the buyer.
//! An event carries no state of its own: a woken watcher reads the order, so a late, lost
//! or repeated event can never show a wrong status, only a late one, and every watcher
//! also reads again on a timer (`orders.watch_recheck_secs`).
//!
//! A watcher costs a map entry, a `watch` channel and a seat: [`OrderWatch::watch`] refuses
//! one past `orders.max_watchers`, so memory stays bounded whatever the crowd does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use domain::OrderToken;
use futures::{Stream, StreamExt};
use platform::shutdown::Shutdown;
use stock_cache::OrderEvent;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::sold_out::SoldOutFlags;

pub struct OrderWatch {
    /// One sender per watched order; each watcher holds a receiver of it.
    watched: Mutex<HashMap<OrderToken, watch::Sender<u64>>>,
    seats: Arc<Semaphore>,
    /// Cancelled when the gateway stops: every stream and long-poll ends at once, rather
    /// than holding the graceful stop open until its grace runs out.
    closing: Shutdown,
}

/// One watcher's hold on an order: woken by each of its changes, released on drop.
pub struct Watcher {
    token: OrderToken,
    changes: watch::Receiver<u64>,
    hub: Arc<OrderWatch>,
    _seat: OwnedSemaphorePermit,
}

impl OrderWatch {
    pub fn new(max_watchers: usize) -> Arc<Self> {
        Arc::new(Self {
            watched: Mutex::default(),
            seats: Arc::new(Semaphore::new(max_watchers)),
            closing: Shutdown::new(),
        })
    }

    /// Starts watching `token`, or `None` when every seat is taken.
    pub fn watch(self: &Arc<Self>, token: &OrderToken) -> Option<Watcher> {
        let seat = self.seats.clone().try_acquire_owned().ok()?;
        let changes = self
            .lock()
            .entry(token.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        metrics::gauge!("seckill_order_watchers").increment(1.0);
        Some(Watcher {
            token: token.clone(),
            changes,
            hub: self.clone(),
            _seat: seat,
        })
    }

    /// Wakes the watchers of `token`, if any are here.
    pub fn changed(&self, token: &OrderToken) {
        if let Some(sender) = self.lock().get(token) {
            sender.send_modify(|version| *version += 1);
        }
    }

    /// Wakes every watcher: events may have been lost (the subscription was re-made).
    pub fn all_changed(&self) {
        for sender in self.lock().values() {
            sender.send_modify(|version| *version += 1);
        }
    }

    /// Ends every stream and long-poll (the gateway is stopping).
    pub fn close(&self) {
        self.closing.cancel();
    }

    pub fn closing(&self) -> &Shutdown {
        &self.closing
    }

    /// Applies the order events of this deployment until they end or `shutdown` fires. A
    /// unit given back also clears the product's sold-out flag at once: the epoch watcher
    /// would too, within its tick.
    pub async fn follow(
        self: Arc<Self>,
        events: impl Stream<Item = OrderEvent>,
        sold_out: Arc<SoldOutFlags>,
        shutdown: Shutdown,
    ) {
        let mut events = std::pin::pin!(events);
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = shutdown.cancelled() => return,
            };
            match event {
                Some(OrderEvent::Changed { token, status }) => {
                    if status.returned_units() {
                        sold_out.clear(token.product_id());
                    }
                    self.changed(&token);
                }
                Some(OrderEvent::Resubscribed) => self.all_changed(),
                None => return,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OrderToken, watch::Sender<u64>>> {
        self.watched.lock().expect("watch lock is never poisoned")
    }
}

impl Watcher {
    /// Returns once the order may have changed (or at once if it did since the last call).
    pub async fn changed(&mut self) {
        // The sender lives as long as any receiver: this cannot fail while we hold one.
        let _ = self.changes.changed().await;
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let mut watched = self.hub.lock();
        // Our own receiver is still alive here: one left means it is the last.
        if watched
            .get(&self.token)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            watched.remove(&self.token);
        }
        metrics::gauge!("seckill_order_watchers").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use domain::ProductId;

    use super::*;

    fn token() -> OrderToken {
        OrderToken::random(ProductId(7))
    }

    #[tokio::test]
    async fn a_watcher_is_woken_by_a_change_of_its_order_only() {
        let hub = OrderWatch::new(10);
        let (mine, other) = (token(), token());
        let mut watcher = hub.watch(&mine).unwrap();
        hub.changed(&other);
        let woken = tokio::time::timeout(Duration::from_millis(50), watcher.changed()).await;
        assert!(woken.is_err(), "another order's change woke the watcher");
        hub.changed(&mine);
        tokio::time::timeout(Duration::from_secs(1), watcher.changed())
            .await
            .expect("its own order's change wakes it");
    }

    #[tokio::test]
    async fn a_change_before_the_wait_is_not_lost() {
        let hub = OrderWatch::new(10);
        let mine = token();
        let mut watcher = hub.watch(&mine).unwrap();
        hub.changed(&mine);
        tokio::time::timeout(Duration::from_secs(1), watcher.changed())
            .await
            .expect("the change made between watch and wait is seen");
    }

    #[test]
    fn seats_are_bounded_and_given_back_on_drop() {
        let hub = OrderWatch::new(2);
        let mine = token();
        let first = hub.watch(&mine).unwrap();
        let _second = hub.watch(&mine).unwrap();
        assert!(hub.watch(&token()).is_none(), "a third watcher got a seat");
        drop(first);
        assert!(hub.watch(&token()).is_some());
    }

    #[test]
    fn an_order_nobody_watches_is_forgotten() {
        let hub = OrderWatch::new(10);
        let mine = token();
        let first = hub.watch(&mine).unwrap();
        let second = hub.watch(&mine).unwrap();
        drop(first);
        assert_eq!(hub.lock().len(), 1, "dropped while another still watches");
        drop(second);
        assert!(hub.lock().is_empty());
    }
}
