-- Shared by the wrk scripts: each thread sends the requests `build(host)` returns, in turn,
-- from a starting point of its own (setup, in wrk's main state, gives each thread a
-- different one, so the threads do not walk the list in step). The requests are formatted
-- once per thread, in init, so that wrk spends its time sending them rather than building
-- them: the load tool then costs the same whichever server it is pointed at. They are
-- formatted in init rather than at load because only then does wrk.headers hold the Host
-- header (HTTP/1.1 requires it; actix-web answers 400 without it).
return function(build)
  local requests = {}
  local next_index = 1

  local threads = 0
  function setup(thread)
    threads = threads + 1
    thread:set("start_index", threads * 7919)
  end

  function init(_)
    requests = build(wrk.headers["Host"])
    assert(#requests > 0, "no requests to send")
    next_index = (start_index or 0) % #requests + 1
  end

  function request()
    local r = requests[next_index]
    next_index = next_index % #requests + 1
    return r
  end
end
