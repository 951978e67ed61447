// Open-model flash-sale load: arrivals at RATE/s regardless of how fast the service answers.
//
//   PROFILE=constant (default)  constant-arrival-rate at RATE for DURATION
//   PROFILE=spike               ramping-arrival-rate 0 -> 3*RATE -> RATE within DURATION:
//                               20% ramp up, 10% hold at 3*RATE, 10% down to RATE, 60% at RATE
//
// All logic (config, requests, classification, thresholds, setup/teardown audit, summary) is in
// ./lib/seckill.js; this file only wires the executor. Run: scripts/k6.sh loadtest/k6/seckill.js
// Environment variables: see loadtest/k6/README.md.

import { config, baseOptions, vuPool, constantArrivals, placeOrder } from './lib/seckill.js';

export { setup, teardown, handleSummary } from './lib/seckill.js';

function scenario() {
  if (config.profile === 'spike') {
    const d = config.durationSec;
    const part = (f) => `${Math.max(1, Math.round(d * f))}s`;
    return {
      executor: 'ramping-arrival-rate',
      startRate: 0,
      timeUnit: '1s',
      ...vuPool(config.rate * 3),
      stages: [
        { target: config.rate * 3, duration: part(0.2) },
        { target: config.rate * 3, duration: part(0.1) },
        { target: config.rate, duration: part(0.1) },
        { target: config.rate, duration: part(0.6) },
      ],
      gracefulStop: '10s',
    };
  }
  return constantArrivals();
}

export const options = {
  ...baseOptions(),
  scenarios: { seckill: scenario() },
};

export default function (data) {
  placeOrder(data);
}
