-- Records that MySQL took an order's payment, for the buyers polling it (the only way out
-- of `confirmed` that keeps the units), and tells the gateways.
-- KEYS[1]: {p}:result
-- ARGV[1]: order token   ARGV[2]: the order-events channel
-- Returns: 1 recorded and "<token> paid" published; 0 already paid: nothing changed.
if redis.call('HGET', KEYS[1], ARGV[1]) == 'paid' then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], 'paid')
redis.call('PUBLISH', ARGV[2], ARGV[1] .. ' paid')
return 1
