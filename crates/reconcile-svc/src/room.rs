//! Whether MySQL can still take an order reconcile would re-publish.
//!
//! The consumer writes an order only through the conditional stock update (`stock >= n`).
//! When Redis sold more units than MySQL holds (a failover to a lagging replica, a crash
//! that lost decrements, a miscounted restock) the last orders can never be written: a
//! re-publish of one of them is no repair, and calling it one would hide an over-sell. So
//! before re-publishing, reconcile checks that MySQL has room for the order, after the
//! orders already on their way (flows younger than the grace window, not yet written) and
//! those re-published before it in the same run; an order beyond that room is reported
//! unresolved, with the numbers and, when the consumer already refused it, its reason.

use order_store::UnwritableOrderRow;

/// MySQL's stock for one product, as re-publishes in this run use it up.
#[derive(Debug, Clone)]
pub struct MysqlRoom {
    /// `product_stock.stock` when it was read.
    stock: i64,
    /// Units of orders still on their way to MySQL when it was read: they take stock first.
    in_flight: i64,
    /// Units re-published in this run so far.
    promised: i64,
}

impl MysqlRoom {
    pub fn new(stock: i64, in_flight: i64) -> Self {
        Self {
            stock,
            in_flight,
            promised: 0,
        }
    }

    /// The units left for re-publishing.
    pub fn left(&self) -> i64 {
        self.stock - self.in_flight - self.promised
    }

    /// Takes `quantity` units for one re-publish; Err with why MySQL cannot take the order
    /// (`refused`: what the consumer recorded when it refused the same order).
    pub fn take(
        &mut self,
        quantity: u32,
        refused: Option<&UnwritableOrderRow>,
    ) -> Result<(), String> {
        let wanted = i64::from(quantity);
        if wanted <= self.left() {
            self.promised += wanted;
            return Ok(());
        }
        let mut why = format!(
            "over-sold: MySQL cannot take its {wanted} unit(s), re-publishing it would repair \
             nothing (MySQL stock {}, of which {} for orders on their way and {} re-published \
             in this run)",
            self.stock, self.in_flight, self.promised
        );
        if let Some(refused) = refused {
            why.push_str(&format!(
                "; the consumer refused it {} time(s): {}",
                refused.refusals, refused.reason
            ));
        }
        Err(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_on_their_way_and_earlier_republishes_come_out_of_the_room() {
        let mut room = MysqlRoom::new(3, 1);
        assert_eq!(room.take(1, None), Ok(()));
        assert_eq!(room.take(1, None), Ok(()));
        assert_eq!(room.left(), 0);
        let why = room.take(1, None).unwrap_err();
        assert!(why.starts_with("over-sold"), "{why}");
        assert!(
            why.contains("MySQL stock 3, of which 1 for orders on their way and 2 re-published"),
            "{why}"
        );
    }

    #[test]
    fn an_order_larger_than_the_room_is_refused_and_takes_nothing() {
        let mut room = MysqlRoom::new(2, 0);
        assert!(room.take(3, None).is_err());
        assert_eq!(room.left(), 2);
        assert_eq!(room.take(2, None), Ok(()));
    }

    #[test]
    fn a_stock_below_what_is_on_its_way_leaves_no_room() {
        let mut room = MysqlRoom::new(1, 4);
        assert_eq!(room.left(), -3);
        assert!(room.take(1, None).is_err());
    }
}
