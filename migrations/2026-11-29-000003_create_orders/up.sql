-- One row per order token: the unique key is what makes a redelivered message harmless.
-- Tokens are lower-case hex with a decimal prefix, so an ASCII binary column keeps the
-- unique index at a quarter of the utf8mb4 size and compares bytes, not collation rules.
-- (product_id, id) serves reconcile's keyset walk over one product's orders.
CREATE TABLE orders (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    order_token VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id BIGINT UNSIGNED NOT NULL,
    product_id BIGINT UNSIGNED NOT NULL,
    quantity INT UNSIGNED NOT NULL,
    status VARCHAR(16) NOT NULL DEFAULT 'confirmed',
    reserved_at DATETIME(3) NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY orders_order_token (order_token),
    KEY orders_product_id_id (product_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
