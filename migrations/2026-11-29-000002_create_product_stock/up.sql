-- The hot row of a sale, kept apart from `products` so that the per-order update locks
-- nothing else. Every decrement is conditional (`stock >= n`); the CHECK is the last line
-- of "never oversell" should a future statement forget that.
CREATE TABLE product_stock (
    product_id BIGINT UNSIGNED NOT NULL,
    stock BIGINT NOT NULL,
    version BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (product_id),
    CONSTRAINT product_stock_not_negative CHECK (stock >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
