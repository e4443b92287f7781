-- Named leases ("one reconcile runner at a time"): a holder owns `name` until expires_at.
-- A lease rather than GET_LOCK because it must outlive a pooled connection being recycled.
CREATE TABLE lease (
    name VARCHAR(64) NOT NULL,
    holder VARCHAR(128) NOT NULL,
    expires_at DATETIME(3) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
