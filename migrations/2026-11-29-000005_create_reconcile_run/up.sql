-- One reconcile run: status is running | clean | repaired | unresolved | failed;
-- `report` is the run's JSON report, written when it finishes.
CREATE TABLE reconcile_run (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    started_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    finished_at DATETIME(3) NULL,
    status VARCHAR(16) NOT NULL,
    policy VARCHAR(16) NOT NULL,
    product_id BIGINT UNSIGNED NULL,
    report LONGTEXT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
