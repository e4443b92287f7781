//! The reconcile lease while a run holds it: renewed every third of its TTL for as long as
//! the run lasts, so that a run longer than the TTL is not joined by a second runner that
//! found the lease expired; and, should it be lost all the same (MySQL out of reach for a
//! whole TTL, or an operator clearing the row), the run is told and stops at its next step
//! instead of repairing alongside another run.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use order_store::Db;

/// The lease's name in the `lease` table.
pub const LEASE: &str = "reconcile";

/// A lease taken by `holder` for `ttl`; [`Lease::keep`] renews it, [`Lease::check`] asks.
pub struct Lease<'a> {
    db: &'a Db,
    holder: &'a str,
    ttl: Duration,
    lost: AtomicBool,
}

impl<'a> Lease<'a> {
    /// Takes the lease; `None` while another holder has it.
    pub async fn take(db: &'a Db, holder: &'a str, ttl: Duration) -> anyhow::Result<Option<Self>> {
        use anyhow::Context;

        let taken = db
            .try_lease(LEASE, holder, ttl)
            .await
            .context("cannot take the reconcile lease")?;
        Ok(taken.then(|| Self {
            db,
            holder,
            ttl,
            lost: AtomicBool::new(false),
        }))
    }

    /// Renews the lease every third of its TTL, for ever: run it beside the work it guards
    /// (`tokio::select!`) so that it ends with the work. A renewal that finds another holder
    /// marks the lease lost. One that fails (MySQL unreachable) is tried again at the next
    /// tick, and marks the lease lost once a whole TTL has passed since the last renewal
    /// that succeeded: by then another runner may hold it.
    pub async fn keep(&self) -> Infallible {
        let period = self.ttl / 3;
        let mut renewed_at = Instant::now();
        loop {
            tokio::time::sleep(period).await;
            if self.lost.load(Ordering::Relaxed) {
                continue;
            }
            match self.db.try_lease(LEASE, self.holder, self.ttl).await {
                Ok(true) => renewed_at = Instant::now(),
                Ok(false) => self.mark_lost("another runner holds it"),
                Err(error) if renewed_at.elapsed() >= self.ttl => {
                    self.mark_lost(&format!(
                        "it could not be renewed for its whole TTL: {error}"
                    ));
                }
                Err(error) => {
                    tracing::warn!(error = ?error, "Cannot renew the reconcile lease; trying again.");
                }
            }
        }
    }

    fn mark_lost(&self, why: &str) {
        tracing::error!(
            holder = self.holder,
            why,
            "Lost the reconcile lease; the run stops at its next step."
        );
        self.lost.store(true, Ordering::Relaxed);
    }

    /// Err once the lease is lost: the run must stop where it is.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.lost.load(Ordering::Relaxed) {
            anyhow::bail!("the run lost the reconcile lease and stopped; another run may hold it");
        }
        Ok(())
    }

    /// Gives the lease back (if it is still ours); a failure only logs: it expires.
    pub async fn release(self) {
        if let Err(error) = self.db.release_lease(LEASE, self.holder).await {
            tracing::warn!(error = ?error, "Cannot release the reconcile lease; it expires by itself.");
        }
    }
}

/// Runs `work` under `lease`, renewing it while `work` lasts.
pub async fn renewed_while<T>(lease: &Lease<'_>, work: impl Future<Output = T>) -> T {
    tokio::select! {
        done = work => done,
        never = lease.keep() => match never {},
    }
}
