//! The flow record: one per reserved purchase, written by `lua/pre_deduct.lua` into the
//! product's `flow` hash and moved on only by `confirm.lua` (→ committed) or
//! `release.lua` (→ deleted, tombstoned). The scripts write the JSON; this type reads it,
//! and writes it only where Redis lost a product and its flows are rebuilt from MySQL.

use serde::{Deserialize, Serialize};

use crate::ids::UserId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowState {
    /// Stock taken in Redis; the order message is not known to be committed yet.
    Reserved,
    /// The transactional message was committed: an order must follow.
    Committed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRecord {
    pub user_id: UserId,
    pub quantity: u32,
    pub stock_before: i64,
    pub stock_after: i64,
    pub reserved_at_ms: i64,
    pub state: FlowState,
}

impl FlowRecord {
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_record_the_lua_script_writes() {
        let json = r#"{"user_id":18446744073709551615,"quantity":2,"stock_before":10,"stock_after":8,"reserved_at_ms":1700000000000,"state":"reserved"}"#;
        let flow = FlowRecord::from_json(json).unwrap();
        assert_eq!(flow.user_id, UserId(u64::MAX));
        assert_eq!(flow.quantity, 2);
        assert_eq!(flow.state, FlowState::Reserved);
    }

    #[test]
    fn a_written_record_reads_back_as_itself() {
        let flow = FlowRecord {
            user_id: UserId(3),
            quantity: 1,
            stock_before: 0,
            stock_after: 0,
            reserved_at_ms: 1_700_000_000_000,
            state: FlowState::Committed,
        };
        let json = serde_json::to_string(&flow).unwrap();
        assert_eq!(
            json,
            r#"{"user_id":3,"quantity":1,"stock_before":0,"stock_after":0,"reserved_at_ms":1700000000000,"state":"committed"}"#
        );
        assert_eq!(FlowRecord::from_json(&json).unwrap(), flow);
    }
}
