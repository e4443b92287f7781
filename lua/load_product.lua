-- Loads a product for sale (admin PUT): its meta and stock, in one step.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock   KEYS[3]: {p}:flow   KEYS[4]: {p}:users
-- KEYS[5]: {p}:result   KEYS[6]: {p}:tomb
-- ARGV[1]: initial stock   ARGV[2]: per-user limit   ARGV[3]: starts at (unix ms, 0 = now)
-- ARGV[4]: ends at (unix ms, 0 = never)   ARGV[5]: stock to sell now
-- ARGV[6]: "fresh" (a new sale: forget flows, buyers and results) or "restock" (keep them)
-- Returns: the new epoch; every gateway drops its sold-out flag when the epoch moves.
if ARGV[6] == 'fresh' then
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'initial_stock', ARGV[1], 'per_user_limit', ARGV[2],
  'starts_at_ms', ARGV[3], 'ends_at_ms', ARGV[4])
redis.call('SET', KEYS[2], ARGV[5])
return epoch
