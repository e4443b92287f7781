-- Fails while any token has both a take and a RELEASE: going back would have to drop
-- the record of units given back, which is not done silently.
ALTER TABLE stock_flow
    DROP KEY stock_flow_order_token_gives_back,
    ADD UNIQUE KEY stock_flow_order_token (order_token),
    DROP COLUMN gives_back;
