//! Who does what once the sale is over: each won order's fate, split by the shares asked
//! for and a seed, so that the same seed over the same orders gives the same story.

use std::collections::BTreeSet;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::Serialize;

/// What the winner of an order does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    /// Pays: the provider calls the payment webhook.
    Pay,
    /// Cancels the order before paying.
    Cancel,
    /// Does nothing and lets `pay_by` pass.
    Abandon,
}

impl Fate {
    /// The status the order must end in.
    pub fn final_status(self) -> &'static str {
        match self {
            Self::Pay => "paid",
            Self::Cancel => "cancelled",
            Self::Abandon => "expired",
        }
    }
}

/// How many of what to ask for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    /// Of the orders, the share paid.
    pub pay: f64,
    /// Of the orders, the share cancelled (at most what paying leaves).
    pub cancel: f64,
    /// Of the payments, the share whose callback the provider sends twice.
    pub duplicate: f64,
    /// Abandoned orders paid after they expired (at most the abandoned ones).
    pub late: usize,
    /// Orders followed on their event stream.
    pub watch: usize,
    /// Callbacks with a bad signature, each for an order of its own.
    pub forged: usize,
}

/// The fate of every order, by its index in the list the plan was made for, and which of
/// them get the provider's special cases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub fates: Vec<Fate>,
    /// Paid orders whose callback is sent twice.
    pub duplicated: BTreeSet<usize>,
    /// Abandoned orders paid once they have expired.
    pub late: BTreeSet<usize>,
    /// Orders followed on their event stream.
    pub watched: BTreeSet<usize>,
    /// Orders sent a forged callback before anything else happens to them.
    pub forged: BTreeSet<usize>,
}

impl Plan {
    /// The split of `orders` orders: exactly `round(orders × share)` of each fate (cancels
    /// capped by what paying leaves, the rest abandoned), placed by a shuffle seeded with
    /// `seed`. The watched orders are taken from each fate in turn, so that a sample of
    /// three or more sees every ending.
    pub fn new(orders: usize, shares: &Shares, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut shuffled: Vec<usize> = (0..orders).collect();
        shuffled.shuffle(&mut rng);

        let pay = share_of(orders, shares.pay);
        let cancel = share_of(orders, shares.cancel).min(orders - pay);
        let mut fates = vec![Fate::Abandon; orders];
        for &i in &shuffled[..pay] {
            fates[i] = Fate::Pay;
        }
        for &i in &shuffled[pay..pay + cancel] {
            fates[i] = Fate::Cancel;
        }
        let of_fate = |fate: Fate| -> Vec<usize> {
            shuffled
                .iter()
                .copied()
                .filter(|&i| fates[i] == fate)
                .collect()
        };
        let (payers, cancellers, abandoners) = (
            of_fate(Fate::Pay),
            of_fate(Fate::Cancel),
            of_fate(Fate::Abandon),
        );

        let duplicated = payers
            .iter()
            .copied()
            .take(share_of(payers.len(), shares.duplicate))
            .collect();
        let late = abandoners.iter().copied().take(shares.late).collect();
        let mut watched = BTreeSet::new();
        let mut lists = [payers.iter(), cancellers.iter(), abandoners.iter()];
        while watched.len() < shares.watch.min(orders) {
            for list in &mut lists {
                if watched.len() < shares.watch
                    && let Some(&i) = list.next()
                {
                    watched.insert(i);
                }
            }
        }
        // From the end of the shuffle, so that they are not all watched ones as well.
        let forged = shuffled.iter().rev().copied().take(shares.forged).collect();
        Self {
            fates,
            duplicated,
            late,
            watched,
            forged,
        }
    }

    pub fn count(&self, fate: Fate) -> usize {
        self.fates.iter().filter(|&&f| f == fate).count()
    }
}

/// `round(n × share)`, within `0..=n` whatever the share.
fn share_of(n: usize, share: f64) -> usize {
    let share = if share.is_finite() {
        share.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((n as f64 * share).round() as usize).min(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares() -> Shares {
        Shares {
            pay: 0.7,
            cancel: 0.15,
            duplicate: 0.1,
            late: 3,
            watch: 20,
            forged: 2,
        }
    }

    #[test]
    fn the_split_gives_each_fate_its_rounded_share_and_the_rest_abandon() {
        let plan = Plan::new(500, &shares(), 42);
        assert_eq!(plan.count(Fate::Pay), 350);
        assert_eq!(plan.count(Fate::Cancel), 75);
        assert_eq!(plan.count(Fate::Abandon), 75);
        assert_eq!(plan.duplicated.len(), 35);
    }

    #[test]
    fn the_same_seed_gives_the_same_plan_and_another_seed_another() {
        assert_eq!(Plan::new(500, &shares(), 42), Plan::new(500, &shares(), 42));
        assert_ne!(
            Plan::new(500, &shares(), 42).fates,
            Plan::new(500, &shares(), 43).fates
        );
    }

    #[test]
    fn duplicates_go_to_payers_and_late_payments_to_abandoned_orders() {
        let plan = Plan::new(500, &shares(), 7);
        assert!(plan.duplicated.iter().all(|&i| plan.fates[i] == Fate::Pay));
        assert_eq!(plan.late.len(), 3);
        assert!(plan.late.iter().all(|&i| plan.fates[i] == Fate::Abandon));
        assert_eq!(plan.forged.len(), 2);
    }

    #[test]
    fn the_watched_sample_sees_every_ending() {
        let plan = Plan::new(500, &shares(), 7);
        assert_eq!(plan.watched.len(), 20);
        for fate in [Fate::Pay, Fate::Cancel, Fate::Abandon] {
            assert!(
                plan.watched.iter().any(|&i| plan.fates[i] == fate),
                "{fate:?}"
            );
        }
    }

    #[test]
    fn cancels_never_take_more_than_paying_leaves() {
        let greedy = Shares {
            pay: 0.8,
            cancel: 0.5,
            ..shares()
        };
        let plan = Plan::new(10, &greedy, 1);
        assert_eq!(
            (
                plan.count(Fate::Pay),
                plan.count(Fate::Cancel),
                plan.count(Fate::Abandon)
            ),
            (8, 2, 0)
        );
        assert!(plan.late.is_empty(), "no abandoned order to pay late");
    }

    #[test]
    fn samples_larger_than_the_orders_take_them_all() {
        let plan = Plan::new(4, &shares(), 1);
        assert_eq!(plan.watched.len(), 4);
        assert_eq!(Plan::new(0, &shares(), 1).fates, Vec::<Fate>::new());
    }

    #[test]
    fn shares_out_of_range_are_clamped() {
        assert_eq!(share_of(10, 1.5), 10);
        assert_eq!(share_of(10, -1.0), 0);
        assert_eq!(share_of(10, f64::NAN), 0);
        assert_eq!(share_of(3, 0.5), 2);
    }
}
