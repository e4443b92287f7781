-- Loads a product for sale, its meta and stock in one step: a new sale, or a product Redis
-- lost rebuilt from MySQL. A running sale is never loaded over: restock.lua changes it.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock   KEYS[3]: {p}:flow   KEYS[4]: {p}:users
-- KEYS[5]: {p}:result   KEYS[6]: {p}:tomb
-- ARGV[1]: initial stock   ARGV[2]: per-user limit   ARGV[3]: starts at (unix ms, 0 = now)
-- ARGV[4]: ends at (unix ms, 0 = never)   ARGV[5]: stock to sell now
-- ARGV[6]: the mode:
--   "define"  a new sale (admin PUT): flows, buyers, results and tombstones of an earlier one
--             are forgotten; refused while any flow exists, since a reservation made a moment
--             ago would be forgotten with them (its order still on the way);
--   "rebuild" a product Redis lost (admin reload), once its orders' flows are written back:
--             they are kept; refused once meta exists again, since the product is then on
--             sale and setting its stock would forget what was sold since;
--   "fresh"   like "define" without the refusal, for tools that seed a product.
-- Returns: the new epoch (every gateway drops its sold-out flag when it moves), or -1 when
--   the mode refused and nothing changed.
local mode = ARGV[6]
if mode == 'define' and redis.call('HLEN', KEYS[3]) > 0 then
  return -1
end
if mode == 'rebuild' and redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
if mode ~= 'rebuild' then
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  -- A new sale generation (meta's `sale`), which purchase tokens carry: pre_deduct.lua
  -- refuses those of an earlier sale. From the clock rather than a counter, so it also
  -- differs from every sale before a Redis loss erased meta; above the last one even if
  -- the clock stepped back.
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local last = tonumber(redis.call('HGET', KEYS[1], 'sale')) or 0
  redis.call('HSET', KEYS[1], 'sale', string.format('%d', math.max(now_ms, last + 1)))
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'initial_stock', ARGV[1], 'per_user_limit', ARGV[2],
  'starts_at_ms', ARGV[3], 'ends_at_ms', ARGV[4])
redis.call('SET', KEYS[2], ARGV[5])
return epoch
