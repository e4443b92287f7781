-- The transactional message's local transaction and the broker's check-back, both, for the
-- orders of one message: one order, or several winners of one product the gateway sent
-- together. A message is committed or rolled back whole, so its orders are too.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock   KEYS[3]: {p}:flow   KEYS[4]: {p}:users
-- KEYS[5]: {p}:tomb
-- ARGV: the message's order tokens (at least one)
-- Returns: 1 COMMIT (every flow is there and is now committed: release.lua will refuse
--   them), 0 ROLLBACK (some flow is gone: released, or never written — none of the orders
--   may be written, so the flows still reserved are given back now, the missing tokens are
--   tombstoned so they can never reserve later, and a flow already committed on its own —
--   by reconcile, or by the gateway re-asking for one order — stays committed for reconcile
--   to re-publish), -4 no answer: Redis lost the product (no meta), so a missing flow proves
--   nothing; the broker asks again, and after an operator's reload the flows of orders MySQL
--   holds are back.
-- Loaded after lib/give_back.lua.
local flows = redis.call('HMGET', KEYS[3], unpack(ARGV))
local complete = true
for i = 1, #ARGV do
  if not flows[i] then
    complete = false
    break
  end
end
if complete then
  for i = 1, #ARGV do
    if not string.find(flows[i], '"state":"committed"', 1, true) then
      local committed = string.gsub(flows[i], '"state":"reserved"', '"state":"committed"')
      redis.call('HSET', KEYS[3], ARGV[i], committed)
    end
  end
  return 1
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -4
end
local gave_back = false
for i = 1, #ARGV do
  local flow = flows[i]
  if not flow then
    if redis.call('HEXISTS', KEYS[5], ARGV[i]) == 0 then
      redis.call('HSET', KEYS[5], ARGV[i], '{"reason":"rolled_back"}')
    end
  elseif not string.find(flow, '"state":"committed"', 1, true) then
    give_back(KEYS, ARGV[i], flow, 'rolled_back')
    gave_back = true
  end
end
if gave_back then
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
end
return 0
