-- The first step of rebuilding a product Redis lost (admin reload): forgets whatever is left
-- of its flows, buyers and results, which the reload then writes back from MySQL. Tombstones
-- stay: a token released or rolled back must never reserve again.
-- KEYS[1]: {p}:meta   KEYS[2]: {p}:flow   KEYS[3]: {p}:users   KEYS[4]: {p}:result
-- Returns: 1 forgotten; 0 refused, nothing changed: meta exists, so the product is on sale
--   again (an admin PUT or another reload loaded it) and its flows are live.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
