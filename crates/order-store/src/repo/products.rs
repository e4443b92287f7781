//! Products and their stock row, as operators define them.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Unsigned};
use diesel_async::{AsyncConnection, RunQueryDsl};
use domain::ProductId;

use super::{count_star, sum_quantity, to_datetime};
use crate::db::Db;
use crate::error::{Result, StoreError};
use crate::models::{NewProduct, ProductRow, ProductValues, PutOutcome, RawProduct, StockValues};
use crate::schema::{orders, product_stock, products};

impl Db {
    /// Defines a product and sets its stock, in one transaction.
    ///
    /// A product without orders is simply (re)defined: `initial_stock` and the stock row
    /// both become `product.initial_stock`. Once orders exist that would break
    /// `stock + ordered = initial`, so it is refused ([`StoreError::OrdersExist`]) unless
    /// `force` is given, which restocks: the stock becomes `product.initial_stock` and
    /// `initial_stock` becomes that plus the units already ordered.
    pub async fn put_product(&self, product: &NewProduct, force: bool) -> Result<PutOutcome> {
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
        let starts_at = product.starts_at.map(to_datetime).transpose()?;
        let ends_at = product.ends_at.map(to_datetime).transpose()?;
        let id = product.id.get();
        let mut conn = self.conn().await?;
        conn.transaction(async |conn| {
            // Lock the stock row before counting orders: a consumer batch in flight then
            // either committed already (and is counted) or deducts after us, from the stock
            // we set — both keep `stock + ordered = initial`.
            product_stock::table
                .find(id)
                .select(product_stock::stock)
                .for_update()
                .first::<i64>(conn)
                .await
                .optional()?;
            let (order_count, ordered_units) = orders::table
                .filter(orders::product_id.eq(id))
                .select((count_star(), sum_quantity()))
                .get_result::<(i64, i64)>(conn)
                .await?;
            if order_count > 0 && !force {
                return Err(StoreError::OrdersExist {
                    product_id: product.id,
                    orders: order_count,
                });
            }
            let existed = products::table
                .find(id)
                .select(count_star())
                .get_result::<i64>(conn)
                .await?
                > 0;

            let values = ProductValues {
                id,
                name: &product.name,
                initial_stock: product.initial_stock + ordered_units,
                per_user_limit: product.per_user_limit,
                starts_at,
                ends_at,
            };
            diesel::insert_into(products::table)
                .values(&values)
                .on_conflict(diesel::dsl::DuplicatedKeys)
                .do_update()
                .set(&values)
                .execute(conn)
                .await?;
            diesel::insert_into(product_stock::table)
                .values(StockValues {
                    product_id: id,
                    stock: product.initial_stock,
                })
                .on_conflict(diesel::dsl::DuplicatedKeys)
                .do_update()
                .set((
                    product_stock::stock.eq(product.initial_stock),
                    product_stock::version.eq(product_stock::version + 1),
                ))
                .execute(conn)
                .await?;

            Ok(if order_count > 0 {
                PutOutcome::Restocked {
                    initial_stock: values.initial_stock,
                    ordered_units,
                }
            } else if existed {
                PutOutcome::Replaced
            } else {
                PutOutcome::Created
            })
        })
        .await
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

    /// Units in all orders of the product.
    pub async fn ordered_units(&self, id: ProductId) -> Result<i64> {
        let mut conn = self.conn().await?;
        Ok(orders::table
            .filter(orders::product_id.eq(id.get()))
            .select(sum_quantity())
            .get_result(&mut conn)
            .await?)
    }

    /// The units left in MySQL (`None` without a stock row) and the product's order rows,
    /// read by one statement, so from one snapshot. Read one after the other, a batch the
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

    pub async fn order_count(&self, id: ProductId) -> Result<i64> {
        let mut conn = self.conn().await?;
        Ok(orders::table
            .filter(orders::product_id.eq(id.get()))
            .select(count_star())
            .get_result(&mut conn)
            .await?)
    }
}
