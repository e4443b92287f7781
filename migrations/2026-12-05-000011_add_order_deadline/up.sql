-- The order's life after the purchase: `status` goes from 'confirmed' to exactly one of
-- 'paid', 'cancelled' or 'expired', by a conditional update on 'confirmed', and
-- `closed_at` says when. `pay_by` is the end of the payment window, written with the
-- order; NULL only for orders written before this migration, which therefore never
-- expire. `payment_id` is the provider's id of the payment that paid it.
-- (product_id, status, pay_by) serves the per-product overdue sweep
-- (`status = 'confirmed' AND pay_by < …`) and the per-product counts by status.
ALTER TABLE orders
    ADD COLUMN pay_by DATETIME(3) NULL AFTER reserved_at,
    ADD COLUMN closed_at DATETIME(3) NULL AFTER pay_by,
    ADD COLUMN payment_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER closed_at,
    ADD KEY orders_product_id_status_pay_by (product_id, status, pay_by);
