-- Order messages the consumer can never process (undecodable, wrong version, ...), kept
-- for a person to look at instead of being retried. The body is cut at 1024 bytes, the
-- largest a valid OrderPlaced can be; body_len keeps the size it had.
CREATE TABLE rejected_message (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    msg_id VARCHAR(128) NOT NULL,
    reason VARCHAR(500) NOT NULL,
    body VARBINARY(1024) NOT NULL,
    body_len INT UNSIGNED NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
