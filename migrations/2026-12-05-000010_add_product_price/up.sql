-- What one unit costs, in the currency's smallest unit: a payment callback is checked
-- against `price_cents × orders.quantity`. 0 for products defined before prices existed.
ALTER TABLE products
    ADD COLUMN price_cents BIGINT UNSIGNED NOT NULL DEFAULT 0 AFTER per_user_limit;
