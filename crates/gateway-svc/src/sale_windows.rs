//! The sale windows that issuing a token reads, remembered for a moment per product.
//!
//! Every buyer asks for a token before buying, so in a crowd the token requests outnumber
//! the units many times over; reading the window from Redis for each would send the whole
//! crowd to Redis twice. A window is kept `gateway.sale_window_cache_ms` and then read again,
//! and the requests that miss together share one read.
//!
//! Staleness is safe because nothing is decided on it: pre_deduct.lua checks the window and
//! the sale's generation again at the purchase. A window changed elsewhere (a PUT or a
//! reload through another gateway, Redis losing the product) reaches this gateway's tokens
//! within the setting; a token issued in that moment names the old sale and its purchase
//! is refused, as any token of an earlier sale is. Changes made through this gateway forget
//! the window at once. A product Redis does not have is never remembered, so a sale that is
//! just loaded is seen at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use domain::ProductId;
use moka::future::Cache;
use stock_cache::{CacheError, SaleWindow};

/// Products remembered at once; far above the products any one sale runs.
const MAX_PRODUCTS: u64 = 10_000;

pub struct SaleWindows {
    /// None when the setting is 0: every token reads Redis.
    windows: Option<Cache<ProductId, SaleWindow>>,
}

/// Why no window came back: Redis does not have the product, or could not be asked.
#[derive(Debug, thiserror::Error)]
enum Unread {
    #[error("the product is not loaded")]
    NotLoaded,
    #[error(transparent)]
    Redis(#[from] CacheError),
}

/// Redis could not be asked for the window; every caller that waited on the read gets it.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReadFailed(Arc<Unread>);

impl SaleWindows {
    /// Windows kept for `keep` (zero: none kept).
    pub fn new(keep: Duration) -> Self {
        let windows = (!keep.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(MAX_PRODUCTS)
                .time_to_live(keep)
                .build()
        });
        Self { windows }
    }

    /// The product's window: the one remembered, or what `read` answers (None: Redis does
    /// not have the product). Callers that miss at the same moment share one `read`.
    pub async fn get<F>(
        &self,
        product: ProductId,
        read: F,
    ) -> Result<Option<SaleWindow>, ReadFailed>
    where
        F: Future<Output = Result<Option<SaleWindow>, CacheError>>,
    {
        let Some(windows) = &self.windows else {
            return read
                .await
                .map_err(|error| ReadFailed(Arc::new(error.into())));
        };
        let read = async { read.await?.ok_or(Unread::NotLoaded) };
        match windows.try_get_with(product, read).await {
            Ok(window) => Ok(Some(window)),
            Err(unread) if matches!(*unread, Unread::NotLoaded) => Ok(None),
            Err(unread) => Err(ReadFailed(unread)),
        }
    }

    /// Forgets the product's window: this gateway just changed it.
    pub async fn forget(&self, product: ProductId) {
        if let Some(windows) = &self.windows {
            windows.invalidate(&product).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const PRODUCT: ProductId = ProductId(7);
    const WINDOW: SaleWindow = SaleWindow {
        starts_at_ms: 1_000,
        ends_at_ms: 0,
        sale: 3,
    };

    /// The read a caller hands to `get`, as a counted future answering `answer`: these
    /// tests are of what the windows remember, not of Redis (the API tests read it for real).
    struct Reads {
        reads: AtomicUsize,
    }

    impl Reads {
        fn new() -> Self {
            Self {
                reads: AtomicUsize::new(0),
            }
        }

        async fn read(
            &self,
            answer: Result<Option<SaleWindow>, CacheError>,
        ) -> Result<Option<SaleWindow>, CacheError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            answer
        }

        fn count(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn a_window_is_read_once_while_it_is_remembered() {
        let (windows, reads) = (SaleWindows::new(Duration::from_secs(60)), Reads::new());
        for _ in 0..3 {
            let window = windows.get(PRODUCT, reads.read(Ok(Some(WINDOW)))).await;
            assert_eq!(window.unwrap(), Some(WINDOW));
        }
        assert_eq!(reads.count(), 1);
    }

    #[tokio::test]
    async fn buyers_who_miss_together_share_one_read() {
        let (windows, reads) = (SaleWindows::new(Duration::from_secs(60)), Reads::new());
        let gets = (0..50).map(|_| windows.get(PRODUCT, reads.read(Ok(Some(WINDOW)))));
        for window in futures::future::join_all(gets).await {
            assert_eq!(window.unwrap(), Some(WINDOW));
        }
        assert_eq!(reads.count(), 1);
    }

    #[tokio::test]
    async fn a_window_is_read_again_once_its_time_is_up() {
        let (windows, reads) = (SaleWindows::new(Duration::from_millis(50)), Reads::new());
        windows
            .get(PRODUCT, reads.read(Ok(Some(WINDOW))))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(120)).await;
        windows
            .get(PRODUCT, reads.read(Ok(Some(WINDOW))))
            .await
            .unwrap();
        assert_eq!(reads.count(), 2);
    }

    #[tokio::test]
    async fn a_window_this_gateway_changed_is_read_again_at_once() {
        let (windows, reads) = (SaleWindows::new(Duration::from_secs(60)), Reads::new());
        windows
            .get(PRODUCT, reads.read(Ok(Some(WINDOW))))
            .await
            .unwrap();
        windows.forget(PRODUCT).await;
        let moved = SaleWindow { sale: 4, ..WINDOW };
        let window = windows.get(PRODUCT, reads.read(Ok(Some(moved)))).await;
        assert_eq!(window.unwrap(), Some(moved));
        assert_eq!(reads.count(), 2);
    }

    #[tokio::test]
    async fn a_product_redis_does_not_have_is_never_remembered() {
        let (windows, reads) = (SaleWindows::new(Duration::from_secs(60)), Reads::new());
        assert_eq!(
            windows.get(PRODUCT, reads.read(Ok(None))).await.unwrap(),
            None
        );
        let loaded = windows.get(PRODUCT, reads.read(Ok(Some(WINDOW)))).await;
        assert_eq!(loaded.unwrap(), Some(WINDOW));
        assert_eq!(reads.count(), 2);
    }

    #[tokio::test]
    async fn a_failed_read_is_told_and_not_remembered() {
        let (windows, reads) = (SaleWindows::new(Duration::from_secs(60)), Reads::new());
        let failed = windows
            .get(
                PRODUCT,
                reads.read(Err(CacheError::Timeout(Duration::from_millis(1)))),
            )
            .await;
        assert!(failed.unwrap_err().to_string().contains("did not answer"));
        let window = windows.get(PRODUCT, reads.read(Ok(Some(WINDOW)))).await;
        assert_eq!(window.unwrap(), Some(WINDOW));
        assert_eq!(reads.count(), 2);
    }

    #[tokio::test]
    async fn with_no_time_to_keep_every_token_reads_redis() {
        let (windows, reads) = (SaleWindows::new(Duration::ZERO), Reads::new());
        for _ in 0..3 {
            windows
                .get(PRODUCT, reads.read(Ok(Some(WINDOW))))
                .await
                .unwrap();
        }
        assert_eq!(reads.count(), 3);
    }
}
