//! Rate limits with `governor` (GCRA): one bucket for the whole instance and one per buyer.
//! A rejection says when to come back, as `Retry-After` in whole seconds.

use std::num::NonZeroU32;
use std::time::Duration;

use domain::UserId;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use platform::settings::RateLimitSettings;

use crate::error::ApiError;

pub struct RateLimits {
    global: DefaultDirectRateLimiter,
    per_user: DefaultKeyedRateLimiter<UserId>,
    clock: DefaultClock,
}

fn at_least_one(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n.max(1)).expect("max(1) is non-zero")
}

impl RateLimits {
    pub fn new(settings: &RateLimitSettings) -> Self {
        let global = Quota::per_second(at_least_one(settings.global_per_sec));
        let per_user = Quota::per_second(at_least_one(settings.user_per_sec))
            .allow_burst(at_least_one(settings.user_burst));
        Self {
            global: RateLimiter::direct(global),
            per_user: RateLimiter::keyed(per_user),
            clock: DefaultClock::default(),
        }
    }

    pub fn check_global(&self) -> Result<(), ApiError> {
        self.global.check().map_err(|not_until| {
            metrics::counter!("seckill_rate_limited_total", "scope" => "global").increment(1);
            self.rejection(not_until.wait_time_from(self.clock.now()))
        })
    }

    pub fn check_user(&self, user: UserId) -> Result<(), ApiError> {
        self.per_user.check_key(&user).map_err(|not_until| {
            metrics::counter!("seckill_rate_limited_total", "scope" => "user").increment(1);
            self.rejection(not_until.wait_time_from(self.clock.now()))
        })
    }

    fn rejection(&self, wait: Duration) -> ApiError {
        ApiError::RateLimited {
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
        })
    }

    #[test]
    fn a_buyer_past_the_burst_is_told_when_to_retry() {
        let limits = limits(1, 2);
        assert!(limits.check_user(UserId(1)).is_ok());
        assert!(limits.check_user(UserId(1)).is_ok());
        match limits.check_user(UserId(1)) {
            Err(ApiError::RateLimited { retry_after_secs }) => assert!(retry_after_secs >= 1),
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
}
