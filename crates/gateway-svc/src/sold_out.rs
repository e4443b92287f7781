//! The local sold-out flag: after a product's first "sold out", no request for it reaches
//! Redis or the broker. A flag remembers the product's epoch; when the epoch moves (an
//! admin reload, or a unit released back), the watcher clears it on every instance.

use std::collections::HashMap;
use std::sync::RwLock;

use domain::ProductId;

#[derive(Default)]
pub struct SoldOutFlags {
    /// product → the epoch Redis had when it sold out (None: not read yet).
    flags: RwLock<HashMap<ProductId, Option<i64>>>,
}

impl SoldOutFlags {
    pub fn is_sold_out(&self, product: ProductId) -> bool {
        self.flags
            .read()
            .expect("flag lock is never poisoned")
            .contains_key(&product)
    }

    pub fn mark(&self, product: ProductId) {
        let mut flags = self.flags.write().expect("flag lock is never poisoned");
        flags.entry(product).or_insert(None);
    }

    pub fn clear(&self, product: ProductId) {
        self.flags
            .write()
            .expect("flag lock is never poisoned")
            .remove(&product);
    }

    pub fn flagged(&self) -> Vec<(ProductId, Option<i64>)> {
        let flags = self.flags.read().expect("flag lock is never poisoned");
        flags.iter().map(|(p, e)| (*p, *e)).collect()
    }

    /// Applies what Redis says now: a flag seen for the first time remembers the epoch; a
    /// flag whose epoch moved (or whose product vanished) is cleared.
    pub fn observe(&self, product: ProductId, current_epoch: Option<i64>) {
        let mut flags = self.flags.write().expect("flag lock is never poisoned");
        let Some(seen) = flags.get_mut(&product) else {
            return;
        };
        match (*seen, current_epoch) {
            (None, Some(epoch)) => *seen = Some(epoch),
            (Some(old), Some(new)) if old == new => {}
            (None, None) => {}
            _ => {
                flags.remove(&product);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_cleared_when_the_epoch_moves() {
        let flags = SoldOutFlags::default();
        flags.mark(ProductId(1));
        flags.observe(ProductId(1), Some(5));
        flags.observe(ProductId(1), Some(5));
        assert!(flags.is_sold_out(ProductId(1)));
        flags.observe(ProductId(1), Some(6));
        assert!(!flags.is_sold_out(ProductId(1)));
    }

    #[test]
    fn a_flag_is_cleared_when_the_product_is_no_longer_loaded() {
        let flags = SoldOutFlags::default();
        flags.mark(ProductId(1));
        flags.observe(ProductId(1), Some(5));
        flags.observe(ProductId(1), None);
        assert!(!flags.is_sold_out(ProductId(1)));
    }
}
