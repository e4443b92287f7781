-- wrk script: POST /api/v1/products/<BENCH_PRODUCT>/purchase, each request with the next
-- buyer of BENCH_TOKENS (lines "<user id> <purchase token>", from `seckill-bench
-- sign-tokens`). The requests are formatted once per thread, in init, so that wrk spends
-- its time sending them rather than building them: the load tool costs the same whichever
-- server it is pointed at (the gateway or `seckill-bench bare-http`).
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

local requests = {}
local next_index = 1

-- Each wrk thread runs this script in a state of its own; setup (in the main state) gives
-- each a different starting buyer, so the threads do not walk the list in step.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("start_index", threads * 7919)
end

-- The requests are formatted here rather than at load: only now does wrk.headers hold the
-- Host header (HTTP/1.1 requires it; actix-web answers 400 without it).
function init(_)
  local host = wrk.headers["Host"]
  for i, buyer in ipairs(buyers) do
    requests[i] = wrk.format(
      "POST",
      "/api/v1/products/" .. product .. "/purchase",
      { ["Host"] = host, ["Content-Type"] = "application/json", ["X-User-Id"] = buyer[1] },
      '{"token":"' .. buyer[2] .. '","quantity":1}'
    )
  end
  next_index = (start_index or 0) % #requests + 1
end

function request()
  local r = requests[next_index]
  next_index = next_index % #requests + 1
  return r
end
