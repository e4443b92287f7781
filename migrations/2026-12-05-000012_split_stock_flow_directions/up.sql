-- An order token now has up to two stock_flow rows: the take (SECKILL or
-- RECONCILE_DEDUCT, which must stay mutually exclusive, so a deduction is never applied
-- twice) and the give-back of a cancelled or expired order (RELEASE). `gives_back` sorts
-- them into the two directions, and the unique key allows one row per token and direction.
-- STORED, not VIRTUAL: both MySQL 8 and MariaDB index it as an ordinary column. No NOT
-- NULL on it (MariaDB refuses NOT NULL on a generated column); op_type is NOT NULL, so
-- it is never NULL.
ALTER TABLE stock_flow
    ADD COLUMN gives_back TINYINT GENERATED ALWAYS AS (op_type = 'RELEASE') STORED AFTER op_type,
    DROP KEY stock_flow_order_token,
    ADD UNIQUE KEY stock_flow_order_token_gives_back (order_token, gives_back);
