//! Named leases: "one reconcile runner at a time" across processes and hosts.
//!
//! A row per name says who holds it until when. Taking it is one atomic upsert that only
//! changes the row when it has expired or is already ours (a renewal); reading the row
//! back tells whether we got it. Unlike `GET_LOCK`, a lease does not depend on keeping one
//! pooled connection, and a holder that dies simply lets it expire.

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Varchar};
use diesel_async::RunQueryDsl;

use crate::db::Db;
use crate::error::{Result, StoreError};
use crate::schema::lease;

/// A longer lease is a configuration mistake (and could overflow DATETIME arithmetic).
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

// The holder is assigned first: MySQL evaluates the assignments left to right and later
// ones see the new values, so `expires_at` moves exactly when the holder is (now) ours.
// VALUES() is deprecated in MySQL 8 in favour of a row alias, which MariaDB lacks; both
// still accept VALUES().
const TAKE_LEASE: &str = "\
    INSERT INTO lease (name, holder, expires_at) \
    VALUES (?, ?, NOW(3) + INTERVAL ? MICROSECOND) \
    ON DUPLICATE KEY UPDATE \
        holder = IF(expires_at <= NOW(3) OR holder = VALUES(holder), VALUES(holder), holder), \
        expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)";

impl Db {
    /// Takes (or renews) the lease `name` for `holder` for `ttl`. True when `holder` holds
    /// it now; false while another holder's lease has not expired.
    pub async fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(StoreError::InvalidData(format!(
                "a lease lasts between 1 µs and {MAX_TTL:?}, not {ttl:?}"
            )));
        }
        if name.chars().count() > 64 || holder.chars().count() > 128 {
            return Err(StoreError::InvalidData(
                "a lease name is at most 64 characters and a holder at most 128".into(),
            ));
        }
        let ttl_us = i64::try_from(ttl.as_micros()).expect("bounded by MAX_TTL");
        let mut conn = self.conn().await?;
        diesel::sql_query(TAKE_LEASE)
            .bind::<Varchar, _>(name)
            .bind::<Varchar, _>(holder)
            .bind::<BigInt, _>(ttl_us)
            .execute(&mut conn)
            .await?;
        let current = lease::table
            .find(name)
            .select(lease::holder)
            .first::<String>(&mut conn)
            .await
            .optional()?;
        Ok(current.as_deref() == Some(holder))
    }

    /// Who holds the lease `name` now, if anyone does (an expired lease is nobody's).
    pub async fn lease_holder(&self, name: &str) -> Result<Option<String>> {
        let mut conn = self.conn().await?;
        Ok(lease::table
            .find(name)
            .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(
                "expires_at > NOW(3)",
            ))
            .select(lease::holder)
            .first::<String>(&mut conn)
            .await
            .optional()?)
    }

    /// Gives the lease up if `holder` has it; true when it did.
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<bool> {
        let mut conn = self.conn().await?;
        let deleted = diesel::delete(
            lease::table
                .filter(lease::name.eq(name))
                .filter(lease::holder.eq(holder)),
        )
        .execute(&mut conn)
        .await?;
        Ok(deleted > 0)
    }
}
