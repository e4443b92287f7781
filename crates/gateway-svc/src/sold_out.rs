//! The local sold-out flag: after a product's first "sold out", no request for it reaches
//! Redis or the broker. A flag remembers the product's epoch; when the epoch moves (an
//! admin reload, or a unit released back), the watcher clears it on every instance.
//! `seckill_sold_out_flag{product_id}` shows each flag: 1 while set, 0 once cleared.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
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
        if let Entry::Vacant(flag) = flags.entry(product) {
            flag.insert(None);
            flag_gauge(product, true);
        }
    }

    pub fn clear(&self, product: ProductId) {
        let removed = self
            .flags
            .write()
            .expect("flag lock is never poisoned")
            .remove(&product);
        if removed.is_some() {
            flag_gauge(product, false);
        }
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
                flag_gauge(product, false);
            }
        }
    }
}

fn flag_gauge(product: ProductId, set: bool) {
    metrics::gauge!("seckill_sold_out_flag", "product_id" => product.get().to_string())
        .set(if set { 1.0 } else { 0.0 });
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
