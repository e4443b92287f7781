-- Shared by release.lua, confirm.lua and return_units.lua (prepended to each when it is
-- loaded): puts the units of a flow back on sale and tombstones its token, so that it can
-- never reserve again. Keys as in release.lua: meta, stock, flow, users, tomb (return_units
-- has one more after them). The caller bumps the epoch.
local function give_back(keys, token, flow, reason)
  local user = string.match(flow, '"user_id":(%d+)')
  local quantity = tonumber(string.match(flow, '"quantity":(%d+)'))
  redis.call('INCRBY', keys[2], quantity)
  if redis.call('HINCRBY', keys[4], user, -quantity) <= 0 then
    redis.call('HDEL', keys[4], user)
  end
  redis.call('HDEL', keys[3], token)
  redis.call('HSET', keys[5], token,
    string.format('{"user_id":%s,"quantity":%d,"reason":"%s"}', user, quantity, reason))
end

