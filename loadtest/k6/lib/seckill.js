// Shared k6 library for the seckill (flash-sale) load scenarios.
//
// Everything reusable lives here: configuration from environment variables, target selection,
// request builders, response classification into custom metrics, thresholds, setup/teardown
// (sale creation, end-of-run audit) and handleSummary. Scenario files only wire the executor
// options and call `placeOrder` from their default function. See ../README.md.
//
// Plain ES module; no remote imports (they are not reachable from CI or developer machines).

import { sleep } from 'k6';
import http from 'k6/http';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';

// ---------------------------------------------------------------------------------------------
// configuration

function envStr(name, def) {
  const v = __ENV[name];
  return v === undefined || v === '' ? def : String(v).trim();
}

function envNum(name, def, { min = -Infinity, max = Infinity, integer = false } = {}) {
  const raw = envStr(name, undefined);
  if (raw === undefined) return def;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    throw new Error(
      `${name}=${JSON.stringify(raw)} is invalid: expected ${integer ? 'an integer' : 'a number'}` +
        ` in [${min}, ${max}]`,
    );
  }
  return n;
}

function envBool(name, def) {
  const raw = envStr(name, undefined);
  if (raw === undefined) return def;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new Error(`${name}=${JSON.stringify(raw)} is invalid: expected 1 or 0`);
}

// k6-style duration ("30s", "1m30s", "2m", "500ms", "1h") or a bare number of seconds -> seconds.
export function parseDuration(text, name = 'duration') {
  const s = String(text).trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  const unit = { ms: 0.001, s: 1, m: 60, h: 3600 };
  let total = 0;
  let consumed = 0;
  let m;
  while ((m = re.exec(s)) !== null) {
    if (m.index !== consumed) break;
    total += Number(m[1]) * unit[m[2]];
    consumed += m[0].length;
  }
  if (consumed !== s.length || consumed === 0) {
    throw new Error(`${name}=${JSON.stringify(text)} is not a duration (e.g. 30s, 2m, 1m30s)`);
  }
  return total;
}

// "1:0.7,2:0.3" -> [{ qty: 1, cum: 0.7 }, { qty: 2, cum: 1 }] (weights are normalised).
export function parseQtyMix(text) {
  const parts = String(text)
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  const entries = parts.map((p) => {
    const m = /^(\d+)\s*:\s*(\d+(?:\.\d+)?|\.\d+)$/.exec(p);
    if (!m || Number(m[1]) < 1 || !(Number(m[2]) > 0)) {
      throw new Error(`QTY_MIX entry ${JSON.stringify(p)} is invalid: expected QTY:WEIGHT, QTY >= 1, WEIGHT > 0`);
    }
    return { qty: Number(m[1]), weight: Number(m[2]) };
  });
  if (entries.length === 0) throw new Error('QTY_MIX is empty');
  const sum = entries.reduce((a, e) => a + e.weight, 0);
  let cum = 0;
  return entries.map((e, i) => {
    cum += e.weight / sum;
    return { qty: e.qty, cum: i === entries.length - 1 ? 1 : cum };
  });
}

function loadConfig() {
  const targets = envStr('TARGETS', 'http://127.0.0.1:8080')
    .split(',')
    .map((t) => t.trim().replace(/\/+$/, ''))
    .filter((t) => t !== '');
  if (targets.length === 0) throw new Error('TARGETS is empty');
  for (const t of targets) {
    if (!/^https?:\/\/[^/]+/.test(t)) throw new Error(`TARGETS entry ${JSON.stringify(t)} is not an http(s) base URL`);
  }
  const profile = envStr('PROFILE', 'constant');
  if (profile !== 'constant' && profile !== 'spike') {
    throw new Error(`PROFILE=${JSON.stringify(profile)} is invalid: expected constant or spike`);
  }
  const durationSec = parseDuration(envStr('DURATION', '30s'), 'DURATION');
  if (durationSec < 1) throw new Error('DURATION must be at least 1s');
  const replayFraction = envNum('REPLAY_FRACTION', 0.05, { min: 0, max: 1 });
  const invalidFraction = envNum('INVALID_FRACTION', 0.02, { min: 0, max: 1 });
  if (replayFraction + invalidFraction > 1) {
    throw new Error('REPLAY_FRACTION + INVALID_FRACTION must not exceed 1');
  }
  const cfg = {
    targets,
    sku: envStr('SKU', 'k6-sale'),
    profile,
    rate: envNum('RATE', 500, { min: 1, integer: true }),
    durationSec,
    duration: `${durationSec}s`,
    users: envNum('USERS', 10000, { min: 1, integer: true }),
    qtyMixText: envStr('QTY_MIX', '1:0.7,2:0.3'),
    qtyMix: parseQtyMix(envStr('QTY_MIX', '1:0.7,2:0.3')),
    replayFraction,
    invalidFraction,
    replayWindow: envNum('REPLAY_WINDOW', 64, { min: 1, integer: true }),
    adminToken: envStr('ADMIN_TOKEN', ''),
    setupSale: envBool('SETUP_SALE', false),
    total: envNum('TOTAL', 10000, { min: 0, integer: true }),
    shards: envNum('SHARDS', 20, { min: 1, integer: true }),
    perUserLimit: envNum('PER_USER_LIMIT', 2, { min: 1, integer: true }),
    maxPerOrder: envNum('MAX_PER_ORDER', 2, { min: 1, integer: true }),
    strategy: envStr('STRATEGY', 'owned-shards'),
    // 0: the service's default payment window (owned strategies only; the others sell final orders).
    paymentWindowMs: envNum('PAYMENT_WINDOW_MS', 0, { min: 0, integer: true }),
    requestTimeout: envStr('REQUEST_TIMEOUT', '10s'),
    readyTimeoutSec: envNum('READY_TIMEOUT', 30, { min: 0 }),
    preVUs: envNum('PRE_VUS', 0, { min: 0, integer: true }),
    maxVUs: envNum('MAX_VUS', 0, { min: 0, integer: true }),
    logUnexpected: envNum('LOG_UNEXPECTED', 1, { min: 0, integer: true }),
    // One console line `ack <Idempotency-Key> <order_id>` per accepted order, for a check outside
    // k6 that every acknowledged order is in the database (the bench runs k6 with --console-output).
    logAcks: envBool('LOG_ACKS', false),
    summaryPath: envStr('SUMMARY_PATH', 'loadtest/results/k6-summary.json'),
  };
  parseDuration(cfg.requestTimeout, 'REQUEST_TIMEOUT');
  return Object.freeze(cfg);
}

export const config = loadConfig();

// The admin token is a secret: never echo it into logs or the summary file.
export function publicConfig() {
  const { qtyMix, adminToken, ...rest } = config;
  return { ...rest, adminToken: adminToken ? '<set>' : '<unset>' };
}

// ---------------------------------------------------------------------------------------------
// metrics

// Order outcomes (one of these per order request).
export const ordersAccepted = new Counter('orders_accepted'); // 201 with a well-formed order
export const ordersReplayed = new Counter('orders_replayed'); // replayed key -> 200, same order
export const soldOut = new Counter('sold_out'); //               409 sold_out
export const userLimit = new Counter('user_limit'); //           409 user_limit_reached
export const invalidRejected = new Counter('invalid_rejected'); // deliberate bad request -> 400 invalid_request
export const busy = new Counter('busy'); //                      503 busy with Retry-After
export const unexpected = new Counter('unexpected'); //          anything else (incl. 5xx, network errors)
export const serverErrors = new Counter('server_errors'); //     5xx except 503 busy (also in unexpected)
export const orderLatency = new Trend('order_latency', true); // duration of accepted (201) orders
export const unitsAccepted = new Counter('units_accepted'); //   sum of quantities of accepted orders

// End-of-run audit (added once, in teardown).
export const auditOversold = new Counter('audit_oversold');
export const auditDuplicates = new Counter('audit_duplicates');
export const auditErrors = new Counter('audit_errors'); // audit unreadable / malformed
export const auditChecks = new Counter('audit_checks'); // audits read and parsed (must be >= 1)
export const auditSold = new Counter('audit_sold');
export const auditStranded = new Counter('audit_stranded');
export const auditInconsistent = new Counter('audit_inconsistent');
export const auditFenceRejections = new Counter('audit_fence_rejections');

// 4xx/503 answers that the API defines are not transport failures: keep them out of
// http_req_failed. Unexpected answers are caught by the `unexpected` counter instead.
http.setResponseCallback(http.expectedStatuses(200, 201, 400, 404, 409, 503));

// Thresholds shared by every scenario. k6 v1.1 evaluates thresholds on metrics that are only
// emitted in teardown(), and exits 99 when one is crossed (verified; see README).
export function thresholds() {
  const t = {
    server_errors: ['count==0'],
    unexpected: ['count==0'],
    audit_oversold: ['count==0'],
    audit_duplicates: ['count==0'],
    audit_errors: ['count==0'],
    // Fails the run when teardown() did not read the audit at all (--no-teardown, teardown timeout),
    // so a run can never pass without its correctness check.
    audit_checks: ['count>=1'],
  };
  // Client-side oversell check: with a freshly reset sale, what clients were told they bought
  // can never exceed the stock.
  if (config.setupSale) t.units_accepted = [`count<=${config.total}`];
  return t;
}

// Options common to every scenario (the scenario file adds `scenarios`).
export function baseOptions() {
  return {
    thresholds: thresholds(),
    summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max', 'count'],
    setupTimeout: `${Math.ceil(config.readyTimeoutSec * config.targets.length) + 60}s`,
    teardownTimeout: '60s',
  };
}

// VU pool for an open model: enough VUs pre-allocated for ~100 ms latency at the peak rate,
// up to ~1 s latency before iterations are dropped (dropped_iterations). PRE_VUS/MAX_VUS override.
export function vuPool(peakRate) {
  const pre = config.preVUs || Math.max(10, Math.ceil(peakRate / 10));
  const max = Math.max(pre, config.maxVUs || Math.max(20, Math.ceil(peakRate)));
  return { preAllocatedVUs: pre, maxVUs: max };
}

// The open model's constant executor: arrivals at RATE/s for DURATION, whatever the answers take.
// Shared by the order load and the HTTP ceiling, so both offer exactly the same arrivals.
export function constantArrivals() {
  return {
    executor: 'constant-arrival-rate',
    rate: config.rate,
    timeUnit: '1s',
    duration: config.duration,
    ...vuPool(config.rate),
    gracefulStop: '10s',
  };
}

// ---------------------------------------------------------------------------------------------
// targets, users, request builders

const ORDER_NAME = 'POST /v1/sales/{sku}/orders';

// Global round-robin over TARGETS (by scenario-wide iteration number).
export function pickTarget() {
  let i = 0;
  try {
    i = exec.scenario.iterationInTest;
  } catch (_) {
    i = 0; // outside a scenario (setup/teardown)
  }
  return config.targets[i % config.targets.length];
}

// Deterministic but spread: VUs walk different, overlapping windows of the user space, so the
// same user comes back (exercising per_user_limit), sometimes from concurrent VUs.
export function pickUser() {
  return `user-${(__VU * 7919 + __ITER) % config.users}`;
}

export function pickQuantity() {
  const r = Math.random();
  for (const e of config.qtyMix) if (r < e.cum) return e.qty;
  return config.qtyMix[config.qtyMix.length - 1].qty;
}

function saleUrl(base) {
  return `${base}/v1/sales/${encodeURIComponent(config.sku)}`;
}

function params(kind, base, extraHeaders, extraTags) {
  return {
    headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...extraHeaders },
    tags: { name: ORDER_NAME, kind, target: base, ...extraTags },
    timeout: config.requestTimeout,
  };
}

export function buildOrder(base, userId, quantity, key) {
  const body = JSON.stringify({ user_id: userId, quantity });
  return { url: `${saleUrl(base)}/orders`, body, params: params('order', base, { 'Idempotency-Key': key }) };
}

export function buildReplay(base, entry) {
  // Same key AND byte-identical body as the first use of that key.
  return {
    url: `${saleUrl(base)}/orders`,
    body: entry.body,
    params: params('replay', base, { 'Idempotency-Key': entry.key }),
  };
}

// Deliberately invalid order bodies; every one must be answered 400 invalid_request.
export const INVALID_CASES = [
  ['malformed_json', () => '{"user_id":"user-1","quantity":'],
  ['quantity_zero', () => JSON.stringify({ user_id: 'user-1', quantity: 0 })],
  ['quantity_too_big', () => JSON.stringify({ user_id: 'user-1', quantity: Math.max(99, config.maxPerOrder + 1) })],
  ['empty_user_id', () => JSON.stringify({ user_id: '', quantity: 1 })],
  ['user_id_65_bytes', () => JSON.stringify({ user_id: 'u'.repeat(65), quantity: 1 })],
  ['wrong_types', () => JSON.stringify({ user_id: 12345, quantity: '1' })],
  ['missing_quantity', () => JSON.stringify({ user_id: 'user-1' })],
  ['missing_user_id', () => JSON.stringify({ quantity: 1 })],
];

let invalidSeq = 0;
export function buildInvalid(base) {
  const [name, make] = INVALID_CASES[(__VU + invalidSeq++) % INVALID_CASES.length];
  return { url: `${saleUrl(base)}/orders`, body: make(), params: params('invalid', base, {}, { invalid_case: name }), name };
}

// ---------------------------------------------------------------------------------------------
// replay memory (per VU: every VU has its own JS runtime, so this is per-VU state)

const accepted = [];
let acceptedNext = 0;

function remember(entry) {
  if (accepted.length < config.replayWindow) accepted.push(entry);
  else accepted[acceptedNext] = entry;
  acceptedNext = (acceptedNext + 1) % config.replayWindow;
}

function pickRemembered() {
  return accepted.length === 0 ? null : accepted[Math.floor(Math.random() * accepted.length)];
}

// ---------------------------------------------------------------------------------------------
// classification

function parseJson(res) {
  try {
    const v = JSON.parse(res.body);
    return v !== null && typeof v === 'object' ? v : null;
  } catch (_) {
    return null;
  }
}

function errorCode(json) {
  return json && typeof json.error === 'string' ? json.error : null;
}

const ORDER_FIELDS = ['order_id', 'sku', 'user_id', 'quantity', 'shard', 'fence'];

function wellFormedOrder(json, userId, quantity) {
  return (
    json !== null &&
    ORDER_FIELDS.every((f) => f in json) &&
    json.order_id !== null &&
    json.order_id !== '' &&
    json.sku === config.sku &&
    json.user_id === userId &&
    json.quantity === quantity
  );
}

function sameOrder(a, b) {
  return ORDER_FIELDS.every((f) => JSON.stringify(a[f]) === JSON.stringify(b[f]));
}

// Outcomes common to every request kind; null if the response needs kind-specific handling.
function commonOutcome(res, json) {
  if (res.status === 0) return { outcome: 'unexpected', reason: `network:${res.error_code || res.error}` };
  if (res.status === 503 && errorCode(json) === 'busy') {
    return res.headers['Retry-After'] !== undefined
      ? { outcome: 'busy' }
      : { outcome: 'unexpected', reason: 'busy_without_retry_after' };
  }
  return null;
}

// Pure classification of one answer. `req` = { kind: 'order'|'replay'|'invalid', userId, quantity, first }.
export function classify(res, req) {
  const json = parseJson(res);
  const common = commonOutcome(res, json);
  if (common) return common;
  const code = errorCode(json);
  if (req.kind === 'invalid') {
    return res.status === 400 && code === 'invalid_request'
      ? { outcome: 'invalid_rejected' }
      : { outcome: 'unexpected', reason: `invalid_got_${res.status}_${code}` };
  }
  if (req.kind === 'replay') {
    if (res.status === 200 && json !== null && sameOrder(json, req.first)) return { outcome: 'replayed' };
    return { outcome: 'unexpected', reason: res.status === 200 ? 'replay_body_mismatch' : `replay_got_${res.status}_${code}` };
  }
  // fresh order with a new key
  if (res.status === 201) {
    return wellFormedOrder(json, req.userId, req.quantity)
      ? { outcome: 'accepted', order: json }
      : { outcome: 'unexpected', reason: 'malformed_201_body' };
  }
  if (res.status === 409 && code === 'sold_out') return { outcome: 'sold_out' };
  if (res.status === 409 && code === 'user_limit_reached') return { outcome: 'user_limit' };
  return { outcome: 'unexpected', reason: `order_got_${res.status}_${code}` };
}

let loggedUnexpected = 0;

export function record(res, req, result) {
  const tags = { kind: req.kind };
  switch (result.outcome) {
    case 'accepted':
      ordersAccepted.add(1, tags);
      unitsAccepted.add(req.quantity, tags);
      orderLatency.add(res.timings.duration, tags);
      break;
    case 'replayed':
      ordersReplayed.add(1, tags);
      break;
    case 'sold_out':
      soldOut.add(1, tags);
      break;
    case 'user_limit':
      userLimit.add(1, tags);
      break;
    case 'invalid_rejected':
      invalidRejected.add(1, tags);
      break;
    case 'busy':
      busy.add(1, tags);
      break;
    default:
      unexpected.add(1, { ...tags, reason: result.reason || 'unknown' });
      if (loggedUnexpected < config.logUnexpected) {
        loggedUnexpected++;
        console.warn(
          `unexpected answer (${result.reason}) to ${req.kind} ${res.request ? res.request.url : ''}: ` +
            `status=${res.status} body=${String(res.body || '').slice(0, 200)}`,
        );
      }
  }
  // 5xx other than the API's own 503 busy (which is an expected, classified answer).
  if (res.status >= 500 && result.outcome !== 'busy') serverErrors.add(1, tags);
}

// ---------------------------------------------------------------------------------------------
// the iteration

// One arrival: a deliberately invalid request (INVALID_FRACTION), a replay of an earlier accepted
// key with its exact body (REPLAY_FRACTION, once this VU has one), or a fresh order.
export function placeOrder(data) {
  const runId = (data && data.runId) || 'norun';
  const base = pickTarget();
  const r = Math.random();

  if (r < config.invalidFraction) {
    const q = buildInvalid(base);
    const res = http.post(q.url, q.body, q.params);
    record(res, { kind: 'invalid' }, classify(res, { kind: 'invalid' }));
    return;
  }

  if (r < config.invalidFraction + config.replayFraction) {
    const entry = pickRemembered();
    if (entry !== null) {
      const q = buildReplay(base, entry);
      const res = http.post(q.url, q.body, q.params);
      const req = { kind: 'replay', first: entry.order };
      record(res, req, classify(res, req));
      return;
    }
    // nothing accepted yet in this VU: fall through to a fresh order
  }

  const userId = pickUser();
  const quantity = pickQuantity();
  const key = `k6-${runId}-${__VU}-${__ITER}`;
  const q = buildOrder(base, userId, quantity, key);
  const res = http.post(q.url, q.body, q.params);
  const req = { kind: 'order', userId, quantity };
  const result = classify(res, req);
  record(res, req, result);
  if (result.outcome === 'accepted') {
    remember({ key, body: q.body, order: result.order });
    if (config.logAcks) console.log(`ack ${key} ${result.order.order_id}`);
  }
}

// ---------------------------------------------------------------------------------------------
// setup / teardown

function adminHeaders() {
  const h = { 'Content-Type': 'application/json', Accept: 'application/json' };
  if (config.adminToken) h.Authorization = `Bearer ${config.adminToken}`;
  return h;
}

function waitReady(base) {
  const deadline = Date.now() + config.readyTimeoutSec * 1000;
  let last = '';
  for (;;) {
    const res = http.get(`${base}/readyz`, { tags: { name: 'GET /readyz', target: base }, timeout: '5s' });
    if (res.status === 200) return;
    last = res.status === 0 ? res.error : `status ${res.status}`;
    if (Date.now() >= deadline) break;
    sleep(0.5);
  }
  throw new Error(`${base}/readyz not ready after ${config.readyTimeoutSec}s (${last})`);
}

function getSale(base) {
  const res = http.get(saleUrl(base), { tags: { name: 'GET /v1/sales/{sku}', target: base }, timeout: '10s' });
  return { res, json: parseJson(res) };
}

export function setup() {
  for (const base of config.targets) waitReady(base);
  const first = config.targets[0];

  if (config.setupSale) {
    for (const e of config.qtyMix) {
      if (e.qty > config.maxPerOrder) {
        console.warn(`QTY_MIX quantity ${e.qty} > MAX_PER_ORDER ${config.maxPerOrder}: those orders will be counted as unexpected`);
      }
    }
    const body = JSON.stringify({
      total: config.total,
      shards: config.shards,
      per_user_limit: config.perUserLimit,
      max_per_order: config.maxPerOrder,
      strategy: config.strategy,
      ...(config.paymentWindowMs > 0 ? { payment_window_ms: config.paymentWindowMs } : {}),
    });
    const res = http.put(saleUrl(first), body, {
      headers: adminHeaders(),
      tags: { name: 'PUT /v1/sales/{sku}', target: first },
      timeout: '30s',
    });
    if (res.status !== 200 && res.status !== 201) {
      const hint = res.status === 401 || res.status === 403 ? ' (set ADMIN_TOKEN)' : '';
      throw new Error(`PUT ${saleUrl(first)} -> ${res.status}${hint}: ${String(res.body).slice(0, 300)}`);
    }
  }

  const { res, json } = getSale(first);
  if (res.status !== 200 || json === null) {
    const hint = res.status === 404 ? ' (create it first, or run with SETUP_SALE=1)' : '';
    throw new Error(`GET ${saleUrl(first)} -> ${res.status}${hint}: ${String(res.body).slice(0, 300)}`);
  }
  const sale = { total: json.total, sold: json.sold, remaining: json.remaining, strategy: json.strategy };
  console.log(`sale ${config.sku} at start: ${JSON.stringify(sale)}; targets: ${config.targets.join(', ')}`);
  return {
    runId: `${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`,
    startedAt: new Date().toISOString(),
    sale,
  };
}

// Reads the audit once (all targets serve the same sale, so the first one is asked) and feeds it
// into the audit_* counters, whose thresholds fail the run. Every target's view of the sale is
// logged so a diverging instance is visible.
export function teardown() {
  const first = config.targets[0];
  // redis-gate writes orders to PostgreSQL behind the answers: wait for its queue to drain (the
  // reconciliation does, bounded, and reports any difference) before auditing PostgreSQL.
  if (config.strategy.startsWith('redis-gate') && config.adminToken) {
    const drained = http.post(`${saleUrl(first)}/reconcile?drain=1`, null, {
      headers: adminHeaders(),
      tags: { name: 'POST /v1/sales/{sku}/reconcile', target: first },
      timeout: '30s',
    });
    console.log(`reconcile after the load: ${drained.status} ${String(drained.body).slice(0, 400)}`);
  }
  const url = `${saleUrl(first)}/audit`;
  const res = http.get(url, { tags: { name: 'GET /v1/sales/{sku}/audit', target: first }, timeout: '30s' });
  const a = parseJson(res);
  const numeric = ['total', 'sold', 'remaining', 'oversold', 'duplicates', 'stranded', 'fence_rejections'];
  if (res.status !== 200 || a === null || !numeric.every((f) => typeof a[f] === 'number')) {
    auditErrors.add(1);
    console.error(`audit unreadable: GET ${url} -> ${res.status} ${String(res.body).slice(0, 300)}`);
  } else {
    auditChecks.add(1);
    auditOversold.add(a.oversold);
    auditDuplicates.add(a.duplicates);
    auditSold.add(a.sold);
    auditStranded.add(a.stranded);
    auditFenceRejections.add(a.fence_rejections);
    auditInconsistent.add(a.consistent === true ? 0 : 1);
    console.log(`audit: ${JSON.stringify(a)}`);
  }
  const views = config.targets.map((base) => {
    const { res: r, json } = getSale(base);
    return json === null ? `${base}: status ${r.status}` : `${base}: sold=${json.sold} remaining=${json.remaining}`;
  });
  console.log(`sale views: ${views.join('; ')}`);
}

// ---------------------------------------------------------------------------------------------
// summary

function metricValue(data, name, stat) {
  const m = data.metrics[name];
  return m && m.values && m.values[stat] !== undefined ? m.values[stat] : 0;
}

function fmtMs(v) {
  return v === undefined ? '-' : `${v.toFixed(2)}ms`;
}

function trendLine(data, name) {
  const m = data.metrics[name];
  if (!m) return `  ${name.padEnd(22)} (no samples)`;
  const v = m.values;
  return (
    `  ${name.padEnd(22)} n=${v.count || 0} avg=${fmtMs(v.avg)} med=${fmtMs(v.med)} ` +
    `p95=${fmtMs(v['p(95)'])} p99=${fmtMs(v['p(99)'])} max=${fmtMs(v.max)}`
  );
}

function thresholdResults(data) {
  const out = [];
  for (const [name, m] of Object.entries(data.metrics)) {
    for (const [expr, t] of Object.entries(m.thresholds || {})) out.push({ metric: name, threshold: expr, ok: t.ok });
  }
  return out.sort((x, y) => (x.metric < y.metric ? -1 : 1));
}

export function handleSummary(data) {
  const c = (n) => metricValue(data, n, 'count');
  const outcomes = {
    orders_accepted: c('orders_accepted'),
    orders_replayed: c('orders_replayed'),
    sold_out: c('sold_out'),
    user_limit: c('user_limit'),
    invalid_rejected: c('invalid_rejected'),
    busy: c('busy'),
    unexpected: c('unexpected'),
    server_errors: c('server_errors'),
    units_accepted: c('units_accepted'),
  };
  const audit = {
    sold: c('audit_sold'),
    oversold: c('audit_oversold'),
    duplicates: c('audit_duplicates'),
    stranded: c('audit_stranded'),
    inconsistent: c('audit_inconsistent'),
    fence_rejections: c('audit_fence_rejections'),
    errors: c('audit_errors'),
    checks: c('audit_checks'),
  };
  const start = data.setup_data && data.setup_data.sale;
  const soldDuringRun = start && audit.checks > 0 ? audit.sold - start.sold : null;
  const thresholdsList = thresholdResults(data);
  const failed = thresholdsList.filter((t) => !t.ok);
  // setup() threw (service not ready, sale missing, PUT refused): k6 exits 107 and no load ran.
  const aborted = !(data.setup_data && data.setup_data.runId);
  const verdict = aborted ? 'aborted' : failed.length === 0 ? 'pass' : 'fail';
  const notes = [];
  if (soldDuringRun !== null && outcomes.units_accepted > soldDuringRun) {
    notes.push(
      `clients were sold ${outcomes.units_accepted} units but the server counts only ${soldDuringRun} sold during the run (lost orders?)`,
    );
  }
  if (soldDuringRun !== null && outcomes.units_accepted < soldDuringRun) {
    notes.push(
      `server sold ${soldDuringRun} units during the run, clients saw ${outcomes.units_accepted} accepted (timeouts/network errors or another client)`,
    );
  }
  if (c('dropped_iterations') > 0) {
    notes.push(`${c('dropped_iterations')} arrivals dropped: not enough VUs (raise MAX_VUS) or the service is saturated`);
  }

  const lines = [];
  const headline = {
    pass: 'PASS',
    fail: `FAIL (${failed.length} threshold(s) crossed)`,
    aborted: 'ABORTED: setup() failed, no load was run (see the error above)',
  }[verdict];
  lines.push('', `seckill k6 summary: ${headline}`);
  lines.push(
    `  sku=${config.sku} profile=${config.profile} rate=${config.rate}/s duration=${config.duration} ` +
      `targets=${config.targets.join(',')}`,
  );
  lines.push(
    `  requests=${c('http_reqs')} (${metricValue(data, 'http_reqs', 'rate').toFixed(1)}/s) ` +
      `http_req_failed=${(metricValue(data, 'http_req_failed', 'rate') * 100).toFixed(2)}% ` +
      `dropped_iterations=${c('dropped_iterations')} max_vus=${metricValue(data, 'vus_max', 'max')}`,
  );
  lines.push('  outcomes:');
  for (const [k, v] of Object.entries(outcomes)) lines.push(`    ${k.padEnd(18)} ${v}`);
  lines.push('  latency:');
  lines.push(trendLine(data, 'order_latency'));
  lines.push(trendLine(data, 'http_req_duration'));
  lines.push(
    `  audit: sold=${audit.sold} oversold=${audit.oversold} duplicates=${audit.duplicates} stranded=${audit.stranded} ` +
      `inconsistent=${audit.inconsistent} fence_rejections=${audit.fence_rejections} read=${audit.checks} unreadable=${audit.errors}` +
      (soldDuringRun === null ? '' : ` sold_during_run=${soldDuringRun}`),
  );
  lines.push('  thresholds:');
  for (const t of thresholdsList) lines.push(`    ${t.ok ? 'ok  ' : 'FAIL'} ${t.metric}: ${t.threshold}`);
  for (const n of notes) lines.push(`  note: ${n}`);
  lines.push(`  full JSON summary: ${config.summaryPath}`, '');

  const report = {
    seckill: {
      verdict,
      failed_thresholds: failed,
      config: publicConfig(),
      sale_at_start: start || null,
      outcomes,
      audit,
      sold_during_run: soldDuringRun,
      notes,
    },
    ...data,
  };
  return {
    stdout: lines.join('\n') + '\n',
    [config.summaryPath]: JSON.stringify(report, null, 2),
  };
}
