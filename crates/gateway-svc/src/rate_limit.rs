//! Rate limits with `governor` (GCRA): one bucket for the whole instance and one per buyer;
//! and a cap on the purchases under way at once. A rejection says when to come back, as
//! `Retry-After` in whole seconds.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use domain::{Refusal, UserId};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::settings::RateLimitSettings;

pub struct RateLimits {
    global: DefaultDirectRateLimiter,
    per_user: DefaultKeyedRateLimiter<UserId>,
    clock: DefaultClock,
    purchases: Arc<Semaphore>,
    purchases_cap: usize,
}

/// A purchase's place among those under way; the place is free again when it drops. Owned,
/// so that it goes with the purchase wherever it runs to its end (see `routes::buyer`).
pub type PurchaseSlot = OwnedSemaphorePermit;

fn at_least_one(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n.max(1)).expect("max(1) is non-zero")
}

impl RateLimits {
    pub fn new(settings: &RateLimitSettings) -> Self {
        let global = Quota::per_second(at_least_one(settings.global_per_sec));
        let per_user = Quota::per_second(at_least_one(settings.user_per_sec))
            .allow_burst(at_least_one(settings.user_burst));
        let purchases_cap = settings.purchases_in_flight.max(1) as usize;
        Self {
            global: RateLimiter::direct(global),
            per_user: RateLimiter::keyed(per_user),
            clock: DefaultClock::default(),
            purchases: Arc::new(Semaphore::new(purchases_cap)),
            purchases_cap,
        }
    }

    /// A place for one purchase on its way to Redis and the broker, or a refusal when
    /// `purchases_in_flight` are already under way. Past what the instance serves, waiting
    /// would only make every buyer late: the queue grows with the crowd, and so do memory
    /// and the answers past `redis.timeout_ms`. A refused buyer retries in a second with
    /// the same token, which the refusal left unused.
    pub fn enter_purchase(&self) -> Result<PurchaseSlot, Refusal> {
        Arc::clone(&self.purchases)
            .try_acquire_owned()
            .map_err(|_| {
                metrics::counter!("seckill_rate_limited_total", "scope" => "in_flight")
                    .increment(1);
                Refusal::RateLimited {
                    retry_after_secs: 1,
                }
            })
    }

    /// Purchases under way now.
    pub fn purchases_in_flight(&self) -> usize {
        self.purchases_cap - self.purchases.available_permits()
    }

    pub fn check_global(&self) -> Result<(), Refusal> {
        self.global.check().map_err(|not_until| {
            metrics::counter!("seckill_rate_limited_total", "scope" => "global").increment(1);
            self.rejection(not_until.wait_time_from(self.clock.now()))
        })
    }

    pub fn check_user(&self, user: UserId) -> Result<(), Refusal> {
        self.per_user.check_key(&user).map_err(|not_until| {
            metrics::counter!("seckill_rate_limited_total", "scope" => "user").increment(1);
            self.rejection(not_until.wait_time_from(self.clock.now()))
        })
    }

    fn rejection(&self, wait: Duration) -> Refusal {
        Refusal::RateLimited {
            retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
        }
    }

    /// Forgets buyers whose buckets are full again, so the map does not grow with the crowd.
    pub fn forget_idle_buyers(&self) {
        self.per_user.retain_recent();
        self.per_user.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(user_per_sec: u32, user_burst: u32) -> RateLimits {
        RateLimits::new(&RateLimitSettings {
            global_per_sec: 1_000,
            user_per_sec,
            user_burst,
            purchases_in_flight: 2,
        })
    }

    #[test]
    fn a_buyer_past_the_burst_is_told_when_to_retry() {
        let limits = limits(1, 2);
        assert!(limits.check_user(UserId(1)).is_ok());
        assert!(limits.check_user(UserId(1)).is_ok());
        match limits.check_user(UserId(1)) {
            Err(Refusal::RateLimited { retry_after_secs }) => assert!(retry_after_secs >= 1),
            other => panic!("expected a rate limit, got {other:?}"),
        }
    }

    #[test]
    fn one_buyer_does_not_use_up_anothers_budget() {
        let limits = limits(1, 1);
        assert!(limits.check_user(UserId(1)).is_ok());
        assert!(limits.check_user(UserId(1)).is_err());
        assert!(limits.check_user(UserId(2)).is_ok());
    }

    #[test]
    fn a_purchase_past_the_cap_is_refused_until_one_under_way_is_answered() {
        let limits = limits(1, 1);
        let first = limits.enter_purchase().expect("a place");
        let _second = limits.enter_purchase().expect("a place");
        assert_eq!(limits.purchases_in_flight(), 2);
        match limits.enter_purchase() {
            Err(Refusal::RateLimited { retry_after_secs }) => assert_eq!(retry_after_secs, 1),
            other => panic!("expected a refusal, got {other:?}"),
        }
        drop(first);
        assert_eq!(limits.purchases_in_flight(), 1);
        assert!(limits.enter_purchase().is_ok());
    }
}
