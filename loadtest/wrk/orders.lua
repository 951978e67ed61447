-- wrk script of the bench's capacity cells (loadtest/bench/capacity.py runs it; see
-- loadtest/README.md, "Capacity, retry storm and hot users"). One wrk process per seckill
-- instance, each connection sending POST /v1/sales/{sku}/orders back to back (a closed loop:
-- this measures what the service absorbs, not latency at an offered rate).
--
--   wrk -t T -c C -d Ds -s orders.lua http://127.0.0.1:PORT -- SKU USERS KEYS SEED QTY_MIX
--
--   SKU      the sale (already created by the runner)
--   USERS    user ids are user-0 .. user-(USERS-1), drawn uniformly
--   KEYS     prefix of every Idempotency-Key: PREFIX-<thread>-<n>, n = 1, 2, ... per thread
--   SEED     seeds each thread's generator with SEED * 1000 + thread number
--   QTY_MIX  cumulative quantity mix, "1:0.7,2:1" (the runner derives it from the k6 library)
--
-- Why the sequence is deterministic: the retry-storm cell runs two wrk processes, one per
-- instance, with the same KEYS and SEED, so that thread t of both sends the same n-th request
-- (same key, same user, same quantity: a byte-identical body). LuaJIT's math.random gives the
-- same sequence from the same seed on every platform. (wrk calls request() once on its first
-- thread before the load, to check the script: key PREFIX-1-1 is never sent, by either process.)
-- The other cells give each instance its own KEYS and SEED (fresh keys everywhere).
--
-- Answers are counted per thread by status, and by error code for 4xx/5xx (one string match on
-- the small error body only); done() prints one line `wrk-result {json}` with wrk's summary,
-- the latency percentiles in µs and those counts.

-- setup() runs in wrk's main Lua state, once per thread, in thread order: it numbers them.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

local path, users, prefix, cum = nil, 1, "", {}
local counter = 0
-- Globals, not locals: setup() sets thread_no, done() reads answers, both through thread:get/set.
thread_no = 0
answers = {} -- status (number) -> count, and "409 user_limit_reached"-style keys for 4xx/5xx
local headers = { ["Content-Type"] = "application/json", ["Accept"] = "application/json" }

function init(args)
  path = "/v1/sales/" .. args[1] .. "/orders"
  users = tonumber(args[2])
  prefix = args[3] .. "-" .. thread_no .. "-"
  math.randomseed(tonumber(args[4]) * 1000 + thread_no)
  for qty, upto in string.gmatch(args[5], "(%d+):([%d.]+)") do
    table.insert(cum, { tonumber(upto), tonumber(qty) })
  end
end

local function quantity()
  local r = math.random()
  for _, e in ipairs(cum) do
    if r < e[1] then return e[2] end
  end
  return cum[#cum][2]
end

function request()
  counter = counter + 1
  headers["Idempotency-Key"] = prefix .. counter
  local body = '{"user_id":"user-' .. math.random(0, users - 1) .. '","quantity":' .. quantity() .. '}'
  return wrk.format("POST", path, headers, body)
end

function response(status, _, body)
  answers[status] = (answers[status] or 0) + 1
  if status >= 400 then
    local kind = status .. " " .. (string.match(body, '"error":"([%w_]+)"') or "?")
    answers[kind] = (answers[kind] or 0) + 1
  end
end

function done(summary, latency, _)
  local total = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("answers")) do
      total[tostring(k)] = (total[tostring(k)] or 0) + v
    end
  end
  local parts = {}
  for k, v in pairs(total) do
    table.insert(parts, string.format('"%s":%d', k, v))
  end
  local e = summary.errors
  io.write(string.format(
    'wrk-result {"requests":%d,"duration_us":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
      .. '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f},"answers":{%s}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    table.concat(parts, ",")))
end
