ALTER TABLE orders
    DROP KEY orders_product_id_status_pay_by,
    DROP COLUMN payment_id,
    DROP COLUMN closed_at,
    DROP COLUMN pay_by;
