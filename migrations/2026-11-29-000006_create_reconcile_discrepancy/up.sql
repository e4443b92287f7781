-- Every difference a run found and what it did about it, so a repair can be audited.
CREATE TABLE reconcile_discrepancy (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    run_id BIGINT UNSIGNED NOT NULL,
    product_id BIGINT UNSIGNED NOT NULL,
    kind VARCHAR(32) NOT NULL,
    order_token VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    action VARCHAR(32) NOT NULL,
    outcome VARCHAR(32) NOT NULL,
    detail VARCHAR(500) NOT NULL DEFAULT '',
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    KEY reconcile_discrepancy_run_id (run_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
