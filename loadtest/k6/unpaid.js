// A sale where a share of buyers never pay. Every buyer reserves one unit; PAY_SHARE of them pay
// at once, the rest walk away. Their orders expire after WINDOW_MS, the sweepers give the units
// back through the shards' owners, and later buyers get them. When the load ends, the teardown
// keeps buying and paying (one buyer at a time, up to DRAIN_TIMEOUT) until every unit is paid,
// then checks the audit: every unit paid, none reserved or left, units returned, the books exact;
// and the live view of every target (what the sale page shows): the same reserved, paid and
// returned as the audit.
//
//   TARGETS=http://127.0.0.1:8081,http://127.0.0.1:8082 ADMIN_TOKEN=... scripts/k6.sh loadtest/k6/unpaid.js
//
// Environment: TARGETS, ADMIN_TOKEN, SKU (k6-unpaid), TOTAL (2000), SHARDS (4), RATE (200/s),
// DURATION (20s), PAY_SHARE (0.6), WINDOW_MS (2000), DRAIN_TIMEOUT (60s), SUMMARY_PATH (where
// handleSummary writes the counters as JSON; unset: printed).
//
// Exit status: 0 when every check held; 99 when a threshold failed (an unexpected answer, or a
// wrong figure in the audit or the live view). loadtest/bench/unpaid.py runs it in the smoke.

import http from 'k6/http';
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';

const env = (name, def) => (__ENV[name] === undefined || __ENV[name] === '' ? def : __ENV[name]);
const targets = env('TARGETS', 'http://127.0.0.1:8080').split(',').map((t) => t.trim().replace(/\/+$/, ''));
const sku = env('SKU', 'k6-unpaid');
const total = Number(env('TOTAL', '2000'));
const payShare = Number(env('PAY_SHARE', '0.6'));
const windowMs = Number(env('WINDOW_MS', '2000'));
const drainTimeoutSec = Number(env('DRAIN_TIMEOUT', '60'));
const rate = Number(env('RATE', '200'));

const reserved = new Counter('orders_reserved');
const paid = new Counter('orders_paid');
const abandoned = new Counter('orders_abandoned');
const soldOut = new Counter('sold_out');
const unexpected = new Counter('unexpected');
const booksWrong = new Counter('books_wrong');

export const options = {
  scenarios: {
    buyers: {
      executor: 'constant-arrival-rate',
      rate,
      timeUnit: '1s',
      duration: env('DURATION', '20s'),
      preAllocatedVUs: Math.max(10, Math.ceil(rate / 10)),
      maxVUs: Math.max(50, rate),
    },
  },
  // A run fails on any unexpected answer or any wrong figure in the final audit.
  thresholds: { unexpected: ['count==0'], books_wrong: ['count==0'] },
  setupTimeout: '30s',
  teardownTimeout: `${drainTimeoutSec + windowMs / 1000 + 30}s`,
};

const json = { 'Content-Type': 'application/json' };

export function setup() {
  const body = JSON.stringify({ total, shards: Number(env('SHARDS', '4')), per_user_limit: 1, max_per_order: 1, payment_window_ms: windowMs });
  const res = http.put(`${targets[0]}/v1/sales/${sku}`, body, { headers: { ...json, Authorization: `Bearer ${env('ADMIN_TOKEN', '')}` } });
  if (res.status !== 200) throw new Error(`PUT sale -> ${res.status}: ${res.body}`);
}

/// Reserves a unit as `user` on `base`; the order (id, secret) or null when sold out.
function reserve(base, user) {
  const res = http.post(`${base}/v1/sales/${sku}/orders`, JSON.stringify({ user_id: user, quantity: 1 }), { headers: json, tags: { name: 'order' } });
  if (res.status === 201) {
    reserved.add(1);
    return res.json();
  }
  if (res.status === 409 && res.json('error') === 'sold_out') {
    soldOut.add(1);
  } else if (res.status !== 503) {
    unexpected.add(1);
    console.warn(`order -> ${res.status} ${res.body}`);
  }
  return null;
}

function pay(base, order) {
  const headers = { 'X-User-Id': order.user_id, 'X-Order-Secret': order.secret };
  const res = http.post(`${base}/v1/orders/${order.order_id}/pay`, null, { headers, tags: { name: 'pay' } });
  if (res.status === 200) {
    paid.add(1);
    return true;
  }
  unexpected.add(1);
  console.warn(`pay -> ${res.status} ${res.body}`);
  return false;
}

export default function () {
  const base = targets[Math.floor(Math.random() * targets.length)];
  const order = reserve(base, `buyer-${__VU}-${__ITER}-${Math.floor(Math.random() * 1e9)}`);
  if (order === null) return;
  if (Math.random() < payShare) pay(base, order);
  else abandoned.add(1);
}

function audit() {
  return http.get(`${targets[0]}/v1/sales/${sku}/audit`, { tags: { name: 'audit' } }).json();
}

/// What the live view of `base` gets wrong against the final audit `a`: the page's figures.
function liveWrong(base, a) {
  const res = http.get(`${base}/v1/sales/${sku}/live`, { tags: { name: 'live' } });
  if (res.status !== 200) return [`live view of ${base} answered ${res.status}`];
  const live = res.json('sale');
  console.log(`live ${base}: ${JSON.stringify({ reserved: live.reserved, paid: live.paid, returned: live.returned })}`);
  return ['reserved', 'paid', 'returned']
    .filter((k) => live[k] !== a[k])
    .map((k) => `live view of ${base}: ${k} ${live[k]}, the audit ${a[k]}`);
}

export function teardown() {
  const deadline = Date.now() + drainTimeoutSec * 1000;
  let a = audit();
  let n = 0;
  // Buy what is left and what the expired orders give back, paying every unit this time; the
  // audit is asked only when the sale answers sold out (units may still be reserved, to expire).
  while (a.paid < a.total && Date.now() < deadline) {
    const base = targets[n % targets.length];
    const order = reserve(base, `drain-${n++}`);
    if (order !== null) {
      pay(base, order);
      continue;
    }
    sleep(0.2);
    a = audit();
  }
  a = audit();
  console.log(`audit: ${JSON.stringify(a)}`);
  const wrong = [
    [a.paid === a.total, 'every unit paid'],
    [a.reserved === 0 && a.remaining === 0 && a.pending_returns === 0, 'nothing reserved or left'],
    [a.returned > 0, 'units came back'],
    [a.oversold === 0 && a.consistent === true && a.users_over_limit === 0, 'the books exact'],
  ].filter(([ok]) => !ok);
  for (const [, what] of wrong) console.error(`audit: not ${what}`);
  const liveWrongs = targets.flatMap((base) => liveWrong(base, a));
  for (const what of liveWrongs) console.error(what);
  booksWrong.add(wrong.length + liveWrongs.length);
}

export function handleSummary(data) {
  const count = (name) => (data.metrics[name] ? data.metrics[name].values.count : 0);
  const counts = Object.fromEntries(
    ['orders_reserved', 'orders_paid', 'orders_abandoned', 'sold_out', 'unexpected', 'books_wrong'].map((n) => [n, count(n)]),
  );
  const text = `${JSON.stringify(counts)}\n`;
  const path = env('SUMMARY_PATH', '');
  return path ? { [path]: text, stdout: text } : { stdout: text };
}
