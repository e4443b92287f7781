-- Reserves units for one purchase, atomically: the only place stock is taken.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock   KEYS[3]: {p}:flow   KEYS[4]: {p}:users
-- KEYS[5]: {p}:tomb
-- ARGV[1]: order token   ARGV[2]: user id (decimal)   ARGV[3]: quantity (>= 1)
-- ARGV[4] (optional): the sale generation the buyer's purchase token was issued in; absent
--   only for callers that hold no token (tools, tests).
-- Returns: {code, stock}: 1 reserved (stock = what is left), -1 duplicate token,
--   -2 per-user limit exceeded, -3 sold out, -4 product not loaded, -5 sale not open (or
--   the token is of an earlier sale of the product), -6 quantity outside 1..=per-user
--   limit. Only code 1 writes anything.
local meta = redis.call('HMGET', KEYS[1], 'per_user_limit', 'starts_at_ms', 'ends_at_ms', 'sale')
local limit = tonumber(meta[1])
local stock = tonumber(redis.call('GET', KEYS[2]))
-- Missing meta or stock means Redis lost the product: never read that as "0 in stock".
if not limit or not stock then
  return {-4, 0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local starts = tonumber(meta[2]) or 0
local ends = tonumber(meta[3]) or 0
if now < starts or (ends > 0 and now >= ends) then
  return {-5, stock}
end
-- A token of an earlier sale of this product: that sale is over, whatever the window of
-- the one that replaced it says. A product loaded before sales had generations has 0.
if ARGV[4] and tonumber(ARGV[4]) ~= (tonumber(meta[4]) or 0) then
  return {-5, stock}
end
local quantity = tonumber(ARGV[3])
if not quantity or quantity < 1 or quantity > limit then
  return {-6, stock}
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 or redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then
  return {-1, stock}
end
local held = tonumber(redis.call('HGET', KEYS[4], ARGV[2]) or '0')
if held + quantity > limit then
  return {-2, stock}
end
if stock < quantity then
  return {-3, stock}
end
local after = redis.call('DECRBY', KEYS[2], quantity)
redis.call('HINCRBY', KEYS[4], ARGV[2], quantity)
-- Built by hand: cjson would print a large user id as a float and lose digits.
redis.call('HSET', KEYS[3], ARGV[1], string.format(
  '{"user_id":%s,"quantity":%d,"stock_before":%d,"stock_after":%d,"reserved_at_ms":%d,"state":"reserved"}',
  ARGV[2], quantity, stock, after, now))
return {1, after}
