-- Gives back the units of an order MySQL has closed unpaid (cancelled by its buyer, or
-- expired past its pay_by), at most once: MySQL decides how an order ends, Redis follows.
-- The flow leaves for the tombstone, as give_back does, so a second call (a redelivered
-- deadline, a cancel asked again, reconcile) finds the tombstone and changes nothing.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock   KEYS[3]: {p}:flow   KEYS[4]: {p}:users
-- KEYS[5]: {p}:tomb   KEYS[6]: {p}:result
-- ARGV[1]: order token   ARGV[2]: the status MySQL closed it with (cancelled | expired)
-- ARGV[3]: the order-events channel
-- Returns: 1 returned: stock + q, the buyer's count - q, the flow tombstoned with the status
--   as its reason, result = the status, a new epoch (every gateway drops its sold-out flag)
--   and "<token> <status>" published; 0 already returned (no flow, and the tombstone says
--   cancelled or expired); -4 not loaded (no meta or no stock): Redis lost the product and
--   a reload restores it from MySQL; -1 Redis does not hold this order's units (no flow,
--   and no tombstone or one for another reason, e.g. a reservation given back before its
--   order was written): reconcile reports it. Only 1 writes anything.
-- Loaded after lib/give_back.lua.
local status = ARGV[2]
if status ~= 'cancelled' and status ~= 'expired' then
  return redis.error_reply('return_units: the status must be cancelled or expired')
end
local flow = redis.call('HGET', KEYS[3], ARGV[1])
if not flow then
  local tomb = redis.call('HGET', KEYS[5], ARGV[1])
  if tomb and (string.find(tomb, '"reason":"cancelled"', 1, true)
      or string.find(tomb, '"reason":"expired"', 1, true)) then
    return 0
  end
end
-- Checked after the tombstone: an order returned before Redis lost the product stays
-- returned (tombstones outlive a reload), while a missing flow proves nothing without meta.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return -4
end
if not flow then
  return -1
end
give_back(KEYS, ARGV[1], flow, status)
redis.call('HSET', KEYS[6], ARGV[1], status)
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('PUBLISH', ARGV[3], ARGV[1] .. ' ' .. status)
return 1
