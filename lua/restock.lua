-- Restocks a running sale (admin PUT with "force"), in one step: its initial stock becomes
-- ARGV[1] and its stock moves by the same amount from whatever it is at this instant, so a
-- unit reserved a moment before stays sold and is counted once. Stock is never set: a SET
-- would overwrite the reservations made since it was read.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock
-- ARGV[1]: the new initial stock   ARGV[2]: per-user limit   ARGV[3]: starts at (unix ms,
--   0 = now)   ARGV[4]: ends at (unix ms, 0 = never)
-- Returns {code, a, b}:
--   {1, delta, stock}  restocked: initial and stock moved by delta; stock is on sale now;
--   {-4, 0, 0}         not loaded (no meta or no stock): Redis lost the product, which only
--                      a reload rebuilds;
--   {-7, sold, 0}      refused: `sold` units are reserved already, more than the new initial
--                      stock; nothing changed.
local initial = tonumber(redis.call('HGET', KEYS[1], 'initial_stock'))
local stock = tonumber(redis.call('GET', KEYS[2]))
if not initial or not stock then
  return {-4, 0, 0}
end
local delta = tonumber(ARGV[1]) - initial
if stock + delta < 0 then
  return {-7, initial - stock, 0}
end
local after = redis.call('INCRBY', KEYS[2], delta)
redis.call('HSET', KEYS[1], 'initial_stock', ARGV[1], 'per_user_limit', ARGV[2],
  'starts_at_ms', ARGV[3], 'ends_at_ms', ARGV[4])
-- A new epoch tells every gateway to drop its sold-out flag: units may be back on sale.
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
return {1, delta, after}
