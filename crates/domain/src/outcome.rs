//! What `lua/pre_deduct.lua` answers. The script returns `{code, stock_after}`; the codes
//! are fixed here and in the script's header, nowhere else.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreDeductOutcome {
    /// The unit is reserved and its flow written; `stock_after` is what is left.
    Reserved { stock_after: i64 },
    /// This order token has been used (or tombstoned) already.
    Duplicate,
    /// The buyer would hold more than the per-user limit.
    LimitExceeded,
    /// Not enough stock left; `stock_left` may still serve a smaller quantity.
    SoldOut { stock_left: i64 },
    /// The product's meta is missing: Redis was never loaded or lost its data.
    NotLoaded,
    /// Outside the product's sale window.
    SaleNotOpen,
    /// The quantity asked for is outside 1..=per-user limit: bad input, nothing was written.
    QuantityAboveLimit,
}

impl PreDeductOutcome {
    pub fn from_script(code: i64, stock_after: i64) -> Option<Self> {
        Some(match code {
            1 => Self::Reserved { stock_after },
            -1 => Self::Duplicate,
            -2 => Self::LimitExceeded,
            -3 => Self::SoldOut {
                stock_left: stock_after,
            },
            -4 => Self::NotLoaded,
            -5 => Self::SaleNotOpen,
            -6 => Self::QuantityAboveLimit,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_code_has_one_meaning() {
        assert_eq!(
            PreDeductOutcome::from_script(1, 4),
            Some(PreDeductOutcome::Reserved { stock_after: 4 })
        );
        assert_eq!(
            PreDeductOutcome::from_script(-3, 0),
            Some(PreDeductOutcome::SoldOut { stock_left: 0 })
        );
        assert_eq!(PreDeductOutcome::from_script(0, 0), None);
    }
}
