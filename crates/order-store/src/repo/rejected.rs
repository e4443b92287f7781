//! Messages the consumer can never process, kept for a person instead of retried.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::Db;
use crate::error::Result;
use crate::models::truncate_chars;
use crate::schema::rejected_message;

/// The widest body kept: a valid order message is never larger.
const MAX_BODY: usize = 1024;

impl Db {
    /// Records a rejected message. `msg_id` is cut at 128 characters, `reason` at 500, and
    /// `body` at 1024 bytes (its full length is kept).
    pub async fn record_rejected_message(
        &self,
        msg_id: &str,
        reason: &str,
        body: &[u8],
    ) -> Result<()> {
        let mut conn = self.conn().await?;
        diesel::insert_into(rejected_message::table)
            .values((
                rejected_message::msg_id.eq(truncate_chars(msg_id, 128)),
                rejected_message::reason.eq(truncate_chars(reason, 500)),
                rejected_message::body.eq(&body[..body.len().min(MAX_BODY)]),
                rejected_message::body_len.eq(u32::try_from(body.len()).unwrap_or(u32::MAX)),
            ))
            .execute(&mut conn)
            .await?;
        Ok(())
    }
}
