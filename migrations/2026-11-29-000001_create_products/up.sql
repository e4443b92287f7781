-- One product on sale. `initial_stock` is what the sale started with (plus any restock):
-- reconcile checks `product_stock.stock + units ordered = initial_stock`.
-- Times are UTC: every connection runs with time_zone = '+00:00'.
CREATE TABLE products (
    id BIGINT UNSIGNED NOT NULL,
    name VARCHAR(200) NOT NULL,
    initial_stock BIGINT NOT NULL,
    per_user_limit INT UNSIGNED NOT NULL,
    starts_at DATETIME(3) NULL,
    ends_at DATETIME(3) NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
