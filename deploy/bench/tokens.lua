-- wrk script: POST /api/v1/products/<BENCH_PRODUCT>/tokens, each request for the next of
-- BENCH_USERS buyers (user ids 1..BENCH_USERS, default 1,000): the token path (identity, the
-- rate limits, the sale window as the gateway keeps it, the HMAC signature).
-- Environment: BENCH_PRODUCT (product id), BENCH_USERS (how many buyers).
local product = os.getenv("BENCH_PRODUCT")
assert(product, "BENCH_PRODUCT must be set")
local users = tonumber(os.getenv("BENCH_USERS") or "1000")

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "rotate.lua")(function(host)
  local requests = {}
  for user = 1, users do
    requests[user] = wrk.format(
      "POST",
      "/api/v1/products/" .. product .. "/tokens",
      { ["Host"] = host, ["X-User-Id"] = tostring(user) }
    )
  end
  return requests
end)
