// HTTP ceiling: the same open model as seckill.js (constant-arrival-rate at RATE for DURATION,
// round-robin over TARGETS, the same VU pool) against `GET /healthz`, which touches neither
// Redis nor PostgreSQL. What the instances (and k6 on the same machine) manage here bounds what
// any stock strategy can reach over HTTP. Run: scripts/k6.sh loadtest/k6/healthz.js
//
// Uses TARGETS, RATE, DURATION, PRE_VUS, MAX_VUS, REQUEST_TIMEOUT, LOG_UNEXPECTED and
// SUMMARY_PATH from ./lib/seckill.js's configuration; sale settings are ignored, no setup or
// teardown. The summary JSON has `healthz.ok` (200 answers), `healthz.unexpected` and
// `healthz.ok_per_sec` (200 answers / DURATION). Threshold: no unexpected answer.

import http from 'k6/http';
import { Counter, Trend } from 'k6/metrics';
import { config, constantArrivals, pickTarget } from './lib/seckill.js';

const ok = new Counter('healthz_ok');
const unexpected = new Counter('unexpected');
const latency = new Trend('healthz_latency', true);

export const options = {
  thresholds: { unexpected: ['count==0'] },
  summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max', 'count'],
  scenarios: {
    healthz: constantArrivals(),
  },
};

let logged = 0;

export default function () {
  const base = pickTarget();
  const res = http.get(`${base}/healthz`, { tags: { name: 'GET /healthz', target: base }, timeout: config.requestTimeout });
  if (res.status === 200) {
    ok.add(1);
    latency.add(res.timings.duration);
  } else {
    unexpected.add(1);
    if (logged < config.logUnexpected) {
      logged++;
      console.warn(`unexpected answer to GET ${base}/healthz: status=${res.status} error=${res.error || ''}`);
    }
  }
}

function count(data, name) {
  const m = data.metrics[name];
  return m && m.values && m.values.count !== undefined ? m.values.count : 0;
}

export function handleSummary(data) {
  const okCount = count(data, 'healthz_ok');
  const report = {
    healthz: {
      ok: okCount,
      unexpected: count(data, 'unexpected'),
      dropped_iterations: count(data, 'dropped_iterations'),
      ok_per_sec: okCount / config.durationSec,
      rate: config.rate,
      duration_s: config.durationSec,
      targets: config.targets,
    },
    ...data,
  };
  const line =
    `healthz: ${okCount} ok (${(okCount / config.durationSec).toFixed(1)}/s offered ${config.rate}/s), ` +
    `unexpected ${report.healthz.unexpected}, dropped ${report.healthz.dropped_iterations}\n`;
  return { stdout: line, [config.summaryPath]: JSON.stringify(report, null, 2) };
}
