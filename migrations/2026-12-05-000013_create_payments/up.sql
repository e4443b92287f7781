-- Every payment callback that named an order MySQL holds, once per provider payment id:
-- the primary key makes a redelivered callback a replay that answers what the first one
-- did. outcome: 'applied' (it paid the order) or 'refund_due' (the order had ended
-- already, cancelled, expired or paid by another payment: the money goes back).
-- (product_id, outcome) serves the list of refunds due per product.
CREATE TABLE payments (
    payment_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_token VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    product_id BIGINT UNSIGNED NOT NULL,
    amount_cents BIGINT UNSIGNED NOT NULL,
    paid_at DATETIME(3) NOT NULL,
    outcome VARCHAR(16) NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (payment_id),
    KEY payments_product_id_outcome (product_id, outcome)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
