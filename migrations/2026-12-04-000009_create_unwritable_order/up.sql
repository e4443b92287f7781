-- Orders the consumer could decode but MySQL can never take as they stand: the
-- conditional stock update cannot succeed (MySQL has fewer units than Redis sold) or the
-- product has no stock row. Each is acknowledged instead of holding its batch back; it
-- stays here, unresolved, with the reason, for reconcile to report and a person to settle
-- (restock MySQL, then reconcile re-publishes it; or give the buyer their money back).
-- One row per order token: a redelivery or a re-publish refused again bumps `refusals`.
CREATE TABLE unwritable_order (
    order_token VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    product_id BIGINT UNSIGNED NOT NULL,
    user_id BIGINT UNSIGNED NOT NULL,
    quantity INT UNSIGNED NOT NULL,
    reserved_at DATETIME(3) NOT NULL,
    msg_id VARCHAR(128) NOT NULL,
    reason VARCHAR(500) NOT NULL,
    refusals INT UNSIGNED NOT NULL DEFAULT 1,
    first_refused_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    last_refused_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (order_token),
    KEY unwritable_order_product_id (product_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
