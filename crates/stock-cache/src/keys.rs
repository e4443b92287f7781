//! Key names. One product's keys share the hash tag `{<prefix>:<product>}`.

use domain::ProductId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductKeys {
    /// Hash: initial_stock, per_user_limit, starts_at_ms, ends_at_ms, epoch.
    pub meta: String,
    /// String: units left to sell.
    pub stock: String,
    /// Hash: order token → flow record JSON.
    pub flow: String,
    /// Hash: user id → units reserved.
    pub users: String,
    /// Hash: order token → its status once the order is in MySQL: `confirmed` (bare, or
    /// `confirmed <pay_by_ms>`), then `paid`, `cancelled` or `expired`.
    pub result: String,
    /// Hash: order token → why it can never reserve (released, rolled back, or its units
    /// returned: cancelled, expired).
    pub tomb: String,
}

impl ProductKeys {
    pub fn new(prefix: &str, product: ProductId) -> Self {
        let tag = format!("{{{prefix}:{product}}}");
        Self {
            meta: format!("{tag}:meta"),
            stock: format!("{tag}:stock"),
            flow: format!("{tag}:flow"),
            users: format!("{tag}:users"),
            result: format!("{tag}:result"),
            tomb: format!("{tag}:tomb"),
        }
    }
}

impl ProductKeys {
    /// meta, stock, flow, users, tomb: the KEYS of `pre_deduct.lua` and `release.lua`,
    /// in their order.
    pub(crate) fn sale_keys(&self) -> [&str; 5] {
        [&self.meta, &self.stock, &self.flow, &self.users, &self.tomb]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_product_shares_one_hash_tag() {
        let keys = ProductKeys::new("sk", ProductId(42));
        for key in [
            &keys.meta,
            &keys.stock,
            &keys.flow,
            &keys.users,
            &keys.result,
            &keys.tomb,
        ] {
            assert!(key.starts_with("{sk:42}:"), "{key}");
        }
    }
}
