-- Gives a reserved unit back when its message could not be sent (or reconcile's
-- "restore" policy decides so) — never once the flow is committed.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock   KEYS[3]: {p}:flow   KEYS[4]: {p}:users
-- KEYS[5]: {p}:tomb
-- ARGV[1]: order token   ARGV[2]: reason (a word, e.g. send_failed)
-- Returns: 1 released, 0 nothing to release (no flow; tombstoned so that a late confirm
--   rolls back and the token cannot reserve again), -1 refused: the flow is committed.
local flow = redis.call('HGET', KEYS[3], ARGV[1])
if not flow then
  if redis.call('HEXISTS', KEYS[5], ARGV[1]) == 0 then
    redis.call('HSET', KEYS[5], ARGV[1], string.format('{"reason":"%s"}', ARGV[2]))
  end
  return 0
end
if string.find(flow, '"state":"committed"', 1, true) then
  return -1
end
local user = string.match(flow, '"user_id":(%d+)')
local quantity = tonumber(string.match(flow, '"quantity":(%d+)'))
redis.call('INCRBY', KEYS[2], quantity)
if redis.call('HINCRBY', KEYS[4], user, -quantity) <= 0 then
  redis.call('HDEL', KEYS[4], user)
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1],
  string.format('{"user_id":%s,"quantity":%d,"reason":"%s"}', user, quantity, ARGV[2]))
-- A new epoch tells every gateway that stock came back: they drop their sold-out flag.
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
return 1
