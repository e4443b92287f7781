-- wrk script: POST /api/v1/products/<BENCH_PRODUCT>/tokens, each request for the next of
-- BENCH_USERS buyers (user ids 1..BENCH_USERS, default 1,000): the token path (identity, the
-- rate limits, the sale window as the gateway keeps it, the HMAC signature). As in
-- purchase.lua, the requests are formatted once per thread, in init, so that wrk spends its
-- time sending them.
-- Environment: BENCH_PRODUCT (product id), BENCH_USERS (how many buyers).
local product = os.getenv("BENCH_PRODUCT")
assert(product, "BENCH_PRODUCT must be set")
local users = tonumber(os.getenv("BENCH_USERS") or "1000")

local requests = {}
local next_index = 1

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("start_index", threads * 7919)
end

-- Formatted here rather than at load: only now does wrk.headers hold the Host header.
function init(_)
  local host = wrk.headers["Host"]
  for user = 1, users do
    requests[user] = wrk.format(
      "POST",
      "/api/v1/products/" .. product .. "/tokens",
      { ["Host"] = host, ["X-User-Id"] = tostring(user) }
    )
  end
  next_index = (start_index or 0) % #requests + 1
end

function request()
  local r = requests[next_index]
  next_index = next_index % #requests + 1
  return r
end
