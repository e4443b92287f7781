-- wrk script: POST /api/v1/products/<BENCH_PRODUCT>/purchase, each request with the next
-- buyer of BENCH_TOKENS (lines "<user id> <purchase token>", from `seckill-bench
-- sign-tokens`), formatted once per thread (rotate.lua): the load tool costs the same
-- whichever server it is pointed at (the gateway or `seckill-bench bare-http`).
-- Environment: BENCH_TOKENS (file), BENCH_PRODUCT (product id).
local product = os.getenv("BENCH_PRODUCT")
local file = os.getenv("BENCH_TOKENS")
assert(product and file, "BENCH_PRODUCT and BENCH_TOKENS must be set")

local buyers = {}
for line in io.lines(file) do
  local user, token = line:match("^(%S+)%s+(%S+)$")
  if user then
    buyers[#buyers + 1] = { user, token }
  end
end
assert(#buyers > 0, "no tokens in " .. file)

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "rotate.lua")(function(host)
  local requests = {}
  for i, buyer in ipairs(buyers) do
    requests[i] = wrk.format(
      "POST",
      "/api/v1/products/" .. product .. "/purchase",
      { ["Host"] = host, ["Content-Type"] = "application/json", ["X-User-Id"] = buyer[1] },
      '{"token":"' .. buyer[2] .. '","quantity":1}'
    )
  end
  return requests
end)
