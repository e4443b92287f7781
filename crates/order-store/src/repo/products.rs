//! Products and their stock row, as operators define them.

use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::Bool;
use diesel::sql_types::{BigInt, Nullable, Unsigned};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use domain::ProductId;

use super::{HOLDS_UNITS, count_star, sum_quantity, to_datetime};
use crate::db::Db;
use crate::error::{Result, StoreError};
use crate::models::{NewProduct, ProductRow, ProductValues, PutOutcome, RawProduct, StockValues};
use crate::schema::{orders, product_stock, products};

/// What [`Db::put_product_and`] found with the product's rows locked.
struct Locked {
    /// `products.initial_stock`, or `None` for a product never defined.
    initial: Option<i64>,
    /// `product_stock.stock`, or `None` without a stock row.
    stock: Option<i64>,
    orders: i64,
}

/// Why [`Db::put_product_and`] failed, and what was left changed.
#[derive(Debug)]
pub enum PutError<T, E> {
    /// MySQL refused or failed before the load ran: nothing changed.
    Store(StoreError),
    /// The load refused or failed; MySQL rolled back: nothing changed in MySQL.
    Load(E),
    /// The load succeeded, then MySQL's COMMIT failed: the other store holds the change,
    /// and MySQL may or may not (a lost connection leaves the COMMIT's fate unknown).
    Commit { loaded: T, error: StoreError },
}

impl<T, E> From<diesel::result::Error> for PutError<T, E> {
    fn from(error: diesel::result::Error) -> Self {
        Self::Store(error.into())
    }
}

impl<T, E> From<StoreError> for PutError<T, E> {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

impl Db {
    /// Defines a product or restocks it, in one transaction; see [`Db::put_product_and`],
    /// with nothing else to load. The price stays what it was (0 for a new product).
    pub async fn put_product(&self, product: &NewProduct, force: bool) -> Result<PutOutcome> {
        let nothing = |_| std::future::ready(Ok::<(), StoreError>(()));
        flatten(self.put_inner(product, None, force, nothing).await)
    }

    /// [`Db::put_product`], and the price of one unit in cents, in the same transaction.
    pub async fn put_priced_product(
        &self,
        product: &NewProduct,
        price_cents: u64,
        force: bool,
    ) -> Result<PutOutcome> {
        let nothing = |_| std::future::ready(Ok::<(), StoreError>(()));
        flatten(
            self.put_inner(product, Some(price_cents), force, nothing)
                .await,
        )
    }

    /// [`Db::put_product_and`], and the price of one unit in cents, in the same
    /// transaction.
    pub async fn put_priced_product_and<T, E, F, Fut>(
        &self,
        product: &NewProduct,
        price_cents: u64,
        force: bool,
        load: F,
    ) -> std::result::Result<(PutOutcome, T), PutError<T, E>>
    where
        F: FnOnce(PutOutcome) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        self.put_inner(product, Some(price_cents), force, load)
            .await
    }

    /// Defines a product or restocks it, and runs `load` (the same change in Redis) while
    /// MySQL's transaction still holds the product's rows, committing only once `load`
    /// succeeded: a refusal of `load` leaves MySQL as it was.
    ///
    /// `product.initial_stock` is the units the sale has in all, sold or not:
    /// - a product without orders is simply (re)defined: `initial_stock` and the stock row
    ///   both become it ([`PutOutcome::Created`], [`PutOutcome::Replaced`]);
    /// - a product with orders is refused ([`StoreError::OrdersExist`]) unless `force` is
    ///   given, which restocks it ([`PutOutcome::Restocked`]): `initial_stock` moves to the
    ///   new value and the stock row by the same delta, from what it is under the lock, so
    ///   `stock + ordered = initial` keeps holding whatever the consumers write before or
    ///   after. A delta that would leave the stock negative (more units ordered than the
    ///   new total) is refused ([`StoreError::StockBelowSold`]).
    ///
    /// The other fields (name, per-user limit, window) are written as given; the price
    /// stays what it was ([`Db::put_priced_product_and`] writes one).
    pub async fn put_product_and<T, E, F, Fut>(
        &self,
        product: &NewProduct,
        force: bool,
        load: F,
    ) -> std::result::Result<(PutOutcome, T), PutError<T, E>>
    where
        F: FnOnce(PutOutcome) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        self.put_inner(product, None, force, load).await
    }

    async fn put_inner<T, E, F, Fut>(
        &self,
        product: &NewProduct,
        price_cents: Option<u64>,
        force: bool,
        load: F,
    ) -> std::result::Result<(PutOutcome, T), PutError<T, E>>
    where
        F: FnOnce(PutOutcome) -> Fut + Send,
        Fut: Future<Output = std::result::Result<T, E>> + Send,
        T: Send,
        E: Send,
    {
        check_definition(product)?;
        let starts_at = product.starts_at.map(to_datetime).transpose()?;
        let ends_at = product.ends_at.map(to_datetime).transpose()?;
        let values = ProductValues {
            id: product.id.get(),
            name: &product.name,
            initial_stock: product.initial_stock,
            per_user_limit: product.per_user_limit,
            price_cents,
            starts_at,
            ends_at,
        };
        // What `load` gave, should the COMMIT after it fail: the caller must know that the
        // other store changed.
        let loaded = std::sync::Mutex::new(None);
        let mut conn = self.conn().await.map_err(PutError::Store)?;
        let committed = conn
            .transaction(async |conn| {
                let locked = lock_product(conn, values.id).await?;
                let outcome = plan(product, force, &locked)?;
                write_product(conn, &values, outcome).await?;
                let answer = load(outcome).await.map_err(PutError::Load)?;
                *loaded.lock().expect("not poisoned") = Some(answer);
                Ok::<_, PutError<T, E>>(outcome)
            })
            .await;
        let loaded = loaded.into_inner().expect("not poisoned");
        match (committed, loaded) {
            (Ok(outcome), Some(answer)) => Ok((outcome, answer)),
            (Err(PutError::Store(error)), Some(answer)) => Err(PutError::Commit {
                loaded: answer,
                error,
            }),
            (Err(error), _) => Err(error),
            (Ok(_), None) => unreachable!("the transaction commits only after the load"),
        }
    }

    pub async fn product(&self, id: ProductId) -> Result<Option<ProductRow>> {
        let mut conn = self.conn().await?;
        let raw = products::table
            .find(id.get())
            .select(RawProduct::as_select())
            .first(&mut conn)
            .await
            .optional()?;
        Ok(raw.map(ProductRow::from))
    }

    /// Every product defined, in id order: what a full reconcile run walks.
    pub async fn product_ids(&self) -> Result<Vec<ProductId>> {
        let mut conn = self.conn().await?;
        let ids: Vec<u64> = products::table
            .select(products::id)
            .order(products::id)
            .load(&mut conn)
            .await?;
        Ok(ids.into_iter().map(ProductId).collect())
    }

    /// The units left in MySQL, or `None` for a product never defined.
    pub async fn stock(&self, id: ProductId) -> Result<Option<i64>> {
        let mut conn = self.conn().await?;
        Ok(product_stock::table
            .find(id.get())
            .select(product_stock::stock)
            .first(&mut conn)
            .await
            .optional()?)
    }

    /// Units in the orders of the product that hold them: every order but the cancelled
    /// and expired, whose units went back to the stock. `stock + ordered_units = initial`.
    pub async fn ordered_units(&self, id: ProductId) -> Result<i64> {
        let mut conn = self.conn().await?;
        Ok(orders::table
            .filter(orders::product_id.eq(id.get()))
            .filter(sql::<Bool>(HOLDS_UNITS))
            .select(sum_quantity())
            .get_result(&mut conn)
            .await?)
    }

    /// The units left in MySQL (`None` without a stock row) and the product's order rows
    /// (of any status, as [`Db::order_count`]), read by one statement, so from one snapshot. Read one after the other, a batch the
    /// consumer committed in between would show in the second and not the first: a
    /// drained sale would look short of stock deductions (or of orders) that are there.
    pub async fn stock_and_order_count(&self, id: ProductId) -> Result<(Option<i64>, i64)> {
        #[derive(QueryableByName)]
        struct Totals {
            #[diesel(sql_type = Nullable<BigInt>)]
            stock: Option<i64>,
            #[diesel(sql_type = BigInt)]
            orders: i64,
        }
        let mut conn = self.conn().await?;
        let totals = diesel::sql_query(
            "SELECT (SELECT ps.stock FROM product_stock ps WHERE ps.product_id = ?) AS stock, \
             (SELECT COUNT(*) FROM orders o WHERE o.product_id = ?) AS orders",
        )
        .bind::<Unsigned<BigInt>, _>(id.get())
        .bind::<Unsigned<BigInt>, _>(id.get())
        .get_result::<Totals>(&mut conn)
        .await?;
        Ok((totals.stock, totals.orders))
    }

    /// The product's order rows, of any status: an order cancelled or expired was still
    /// an order.
    pub async fn order_count(&self, id: ProductId) -> Result<i64> {
        let mut conn = self.conn().await?;
        Ok(orders::table
            .filter(orders::product_id.eq(id.get()))
            .select(count_star())
            .get_result(&mut conn)
            .await?)
    }
}

/// [`Db::put_product_and`]'s answer without a load: a failure is a store error.
fn flatten(
    put: std::result::Result<(PutOutcome, ()), PutError<(), StoreError>>,
) -> Result<PutOutcome> {
    match put {
        Ok((outcome, ())) => Ok(outcome),
        Err(PutError::Store(error) | PutError::Load(error)) => Err(error),
        Err(PutError::Commit { error, .. }) => Err(error),
    }
}

fn check_definition(product: &NewProduct) -> Result<()> {
    if product.initial_stock < 0 {
        return Err(StoreError::InvalidData(format!(
            "initial stock {} is negative",
            product.initial_stock
        )));
    }
    if product.name.chars().count() > 200 {
        return Err(StoreError::InvalidData(
            "a product name is at most 200 characters".into(),
        ));
    }
    Ok(())
}

/// Locks the product's row, then its stock row, and counts its orders. The product row
/// first: two PUTs of one product then wait for each other whole. The stock row before
/// counting: a consumer batch in flight then either committed already (and is counted) or
/// deducts after this commits, from the stock written here — both keep
/// `stock + ordered = initial`. The count is the transaction's first plain read, so its
/// snapshot is taken with the locks held.
async fn lock_product(conn: &mut AsyncMysqlConnection, id: u64) -> QueryResult<Locked> {
    let initial = products::table
        .find(id)
        .select(products::initial_stock)
        .for_update()
        .first::<i64>(conn)
        .await
        .optional()?;
    let stock = product_stock::table
        .find(id)
        .select(product_stock::stock)
        .for_update()
        .first::<i64>(conn)
        .await
        .optional()?;
    let orders = orders::table
        .filter(orders::product_id.eq(id))
        .select(count_star())
        .get_result::<i64>(conn)
        .await?;
    Ok(Locked {
        initial,
        stock,
        orders,
    })
}

/// What the PUT does to the locked product (see [`Db::put_product_and`]).
fn plan(product: &NewProduct, force: bool, locked: &Locked) -> Result<PutOutcome> {
    let wanted = product.initial_stock;
    if locked.orders == 0 {
        return Ok(match locked.initial {
            None => PutOutcome::Created,
            Some(initial) => PutOutcome::Replaced {
                delta: wanted - initial,
            },
        });
    }
    if !force {
        return Err(StoreError::OrdersExist {
            product_id: product.id,
            orders: locked.orders,
        });
    }
    // Orders exist, so both rows do: orders are only written against a stock row.
    let initial = locked.initial.unwrap_or(0);
    let stock = locked.stock.unwrap_or(0);
    let delta = wanted - initial;
    if stock + delta < 0 {
        return Err(StoreError::StockBelowSold {
            product_id: product.id,
            sold: initial - stock,
            wanted,
        });
    }
    Ok(PutOutcome::Restocked {
        delta,
        stock: stock + delta,
    })
}

/// Writes the definition and the stock `outcome` says.
async fn write_product(
    conn: &mut AsyncMysqlConnection,
    values: &ProductValues<'_>,
    outcome: PutOutcome,
) -> QueryResult<()> {
    diesel::insert_into(products::table)
        .values(values)
        .on_conflict(diesel::dsl::DuplicatedKeys)
        .do_update()
        .set(values)
        .execute(conn)
        .await?;
    let stock = match outcome {
        PutOutcome::Created | PutOutcome::Replaced { .. } => values.initial_stock,
        PutOutcome::Restocked { stock, .. } => stock,
    };
    diesel::insert_into(product_stock::table)
        .values(StockValues {
            product_id: values.id,
            stock,
        })
        .on_conflict(diesel::dsl::DuplicatedKeys)
        .do_update()
        .set((
            product_stock::stock.eq(stock),
            product_stock::version.eq(product_stock::version + 1),
        ))
        .execute(conn)
        .await?;
    Ok(())
}
