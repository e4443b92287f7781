//! After the purchase: where an order is, and how it ends.
//!
//! An order is `queued` while only Redis knows it, `confirmed` once MySQL has it (awaiting
//! payment until its `pay_by`), and then ends exactly once: `paid` (the provider's signed
//! callback), `cancelled` (the buyer) or `expired` (the deadline). `failed` is a
//! reservation given back before its order was ever written. A cancelled or expired order
//! gives its units back to the sale ([`Closing`]); a paid one keeps them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where an order is. The words are the public contract (the API's `status`), MySQL's
/// `orders.status` and Redis's `result` hash alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    Queued,
    Confirmed,
    Paid,
    Cancelled,
    Expired,
    Failed,
}

impl OrderStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Confirmed => "confirmed",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
            Self::Failed => "failed",
        }
    }

    /// No change follows a final status: a stream about the order ends with it.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            Self::Paid | Self::Cancelled | Self::Expired | Self::Failed
        )
    }

    /// The order's units went back to the sale.
    pub const fn returned_units(self) -> bool {
        matches!(self, Self::Cancelled | Self::Expired)
    }
}

impl fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown order status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for OrderStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "queued" => Self::Queued,
            "confirmed" => Self::Confirmed,
            "paid" => Self::Paid,
            "cancelled" => Self::Cancelled,
            "expired" => Self::Expired,
            "failed" => Self::Failed,
            other => return Err(UnknownStatus(other.to_owned())),
        })
    }
}

/// Why a confirmed order ends unpaid and gives its units back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Closing {
    /// The buyer cancelled it.
    Cancelled,
    /// Its `pay_by` passed without a payment.
    Expired,
}

impl Closing {
    pub const fn status(self) -> OrderStatus {
        match self {
            Self::Cancelled => OrderStatus::Cancelled,
            Self::Expired => OrderStatus::Expired,
        }
    }

    pub const fn as_str(self) -> &'static str {
        self.status().as_str()
    }
}

impl fmt::Display for Closing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [OrderStatus; 6] = [
        OrderStatus::Queued,
        OrderStatus::Confirmed,
        OrderStatus::Paid,
        OrderStatus::Cancelled,
        OrderStatus::Expired,
        OrderStatus::Failed,
    ];

    #[test]
    fn every_status_reads_back_from_its_word() {
        for status in ALL {
            assert_eq!(status.as_str().parse::<OrderStatus>(), Ok(status));
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{status}\"")
            );
        }
        assert!("CONFIRMED".parse::<OrderStatus>().is_err());
    }

    #[test]
    fn only_queued_and_confirmed_orders_can_still_change() {
        let open: Vec<_> = ALL.into_iter().filter(|s| !s.is_final()).collect();
        assert_eq!(open, [OrderStatus::Queued, OrderStatus::Confirmed]);
    }

    #[test]
    fn only_cancelled_and_expired_orders_give_their_units_back() {
        let returned: Vec<_> = ALL.into_iter().filter(|s| s.returned_units()).collect();
        assert_eq!(returned, [OrderStatus::Cancelled, OrderStatus::Expired]);
        assert_eq!(Closing::Cancelled.status(), OrderStatus::Cancelled);
        assert_eq!(Closing::Expired.status(), OrderStatus::Expired);
    }
}
