-- The transactional message's local transaction and the broker's check-back, both.
-- KEYS[1]: {p}:flow   KEYS[2]: {p}:tomb   KEYS[3]: {p}:meta
-- ARGV[1]: order token
-- Returns: 1 COMMIT (the flow is there and is now committed: release.lua will refuse it),
--   0 ROLLBACK (no flow: it was released or never written; tombstoned so that the token
--   can never reserve later), -4 no answer: Redis lost the product (no meta), so a missing
--   flow proves nothing; the broker asks again, and after an operator's reload the flows of
--   orders MySQL holds are back.
local flow = redis.call('HGET', KEYS[1], ARGV[1])
if flow then
  if not string.find(flow, '"state":"committed"', 1, true) then
    local committed = string.gsub(flow, '"state":"reserved"', '"state":"committed"')
    redis.call('HSET', KEYS[1], ARGV[1], committed)
  end
  return 1
end
if redis.call('EXISTS', KEYS[3]) == 0 then
  return -4
end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[2], ARGV[1], '{"reason":"rolled_back"}')
end
return 0
