-- Gives a reserved unit back when its message could not be sent (or reconcile's
-- "restore" policy decides so) — never once the flow is committed.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:stock   KEYS[3]: {p}:flow   KEYS[4]: {p}:users
-- KEYS[5]: {p}:tomb
-- ARGV[1]: order token   ARGV[2]: reason (a word, e.g. send_failed)
-- Returns: 1 released, 0 nothing to release (no flow; tombstoned so that a late confirm
--   rolls back and the token cannot reserve again), -1 refused: the flow is committed.
-- Loaded after lib/give_back.lua.
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
give_back(KEYS, ARGV[1], flow, ARGV[2])
-- A new epoch tells every gateway that stock came back: they drop their sold-out flag.
redis.call('HINCRBY', KEYS[1], 'epoch', 1)
return 1
