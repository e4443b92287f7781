-- Records that orders of one product are in MySQL (status polling reads it instead of
-- MySQL), with the deadline for paying when known, and tells the gateways. Never over a
-- later status: a redelivered batch re-marks orders that may be paid, cancelled or
-- expired by now.
-- Each order's flow, if still reserved, is committed too: an order MySQL holds came from a
-- committed message, whose confirm.lua commit Redis can lose (a failover to a replica that
-- had not received it), and a reserved flow could otherwise be released under its order.
-- KEYS[1]: {p}:result   KEYS[2]: {p}:tomb   KEYS[3]: {p}:flow
-- ARGV[1]: the order-events channel
-- ARGV[2], ARGV[3], ...: pairs of order token and pay_by (unix ms; '' when unknown)
-- Returns: how many results changed; each changed one is published as "<token> confirmed".
--   A result is written where it is absent, `queued` or `confirmed` (bare, or with a
--   deadline), as `confirmed <pay_by>` (or bare `confirmed` when the deadline is unknown,
--   keeping a known one). Any other result, or a tombstone saying the units went back
--   (cancelled, expired), is left alone.
local changed = 0
for i = 2, #ARGV, 2 do
  local token, pay_by = ARGV[i], ARGV[i + 1]
  local flow = redis.call('HGET', KEYS[3], token)
  if flow and string.find(flow, '"state":"reserved"', 1, true) then
    redis.call('HSET', KEYS[3], token,
      (string.gsub(flow, '"state":"reserved"', '"state":"committed"')))
  end
  local current = redis.call('HGET', KEYS[1], token)
  local open = not current or current == 'queued' or current == 'confirmed'
    or string.sub(current, 1, 10) == 'confirmed '
  if open and not current then
    local tomb = redis.call('HGET', KEYS[2], token)
    if tomb and (string.find(tomb, '"reason":"cancelled"', 1, true)
        or string.find(tomb, '"reason":"expired"', 1, true)) then
      open = false
    end
  end
  if open then
    local value = 'confirmed'
    if pay_by ~= '' then
      value = 'confirmed ' .. pay_by
    elseif current and current ~= 'queued' then
      value = current
    end
    if value ~= current then
      redis.call('HSET', KEYS[1], token, value)
      redis.call('PUBLISH', ARGV[1], token .. ' confirmed')
      changed = changed + 1
    end
  end
end
return changed
