-- wrk script of the bench's HTTP floor (loadtest/bench/capacity.py runs it): GET /healthz back
-- to back on every connection, one wrk process per seckill instance. No request() or response()
-- function, so wrk sends one pre-built request and never hands answers to Lua: the cheapest
-- client there is, which leaves the most CPU to the service. Its seckill CPU per request is the
-- floor any order pays for HTTP alone.
--
--   wrk -t T -c C -d Ds -s healthz.lua http://127.0.0.1:PORT/healthz
--
-- done() prints one line `wrk-result {json}`, the same shape as orders.lua's (non-2xx answers
-- only as wrk's errors.status count: there are no per-status counts without response()).

wrk.headers["Accept"] = "application/json"

function done(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    'wrk-result {"requests":%d,"duration_us":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
      .. '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f},"answers":{}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
