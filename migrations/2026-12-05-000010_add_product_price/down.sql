ALTER TABLE products DROP COLUMN price_cents;
