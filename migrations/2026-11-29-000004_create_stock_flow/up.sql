-- Every change to `product_stock` made for an order, at most one per order token, so that
-- a deduction can never be applied twice. `quantity` is the units taken from stock
-- (negative for a RELEASE), so SUM(quantity) explains the stock that is gone.
-- op_type: SECKILL (the consumer), RECONCILE_DEDUCT (reconcile's repair), RELEASE.
CREATE TABLE stock_flow (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    order_token VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    product_id BIGINT UNSIGNED NOT NULL,
    quantity INT NOT NULL,
    op_type VARCHAR(24) NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY stock_flow_order_token (order_token),
    KEY stock_flow_product_id (product_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
