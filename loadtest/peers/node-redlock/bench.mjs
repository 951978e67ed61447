// node-redlock under the `lockctl bench` contract.
//
//   node bench.mjs --concurrency C --duration-ms D [--locks K] [--redis-url URL[,URL...]] [--retry-delay-ms N]
//
// C async workers (one event loop, one ioredis connection per server) loop for D ms; worker i uses lock
// `i % K`; every acquire+release pair is timed. Prints one JSON line: concurrency, locks, pairs,
// pairs_per_sec, p50_us, p99_us, overlaps.
//
// Acquire: `redlock.acquire([key], 5000)` with retryCount -1 (retry forever), so a worker keeps
// retrying a held lock. Pause between attempts = retryDelay + floor((rand*2-1) * retryJitter) ms;
// with the defaults here (5, 5) that is uniform over 0..9 ms, the same as rslock with
// retry_delay 10 ms. (Library defaults: retryCount 10, retryDelay 200, retryJitter 100.)
// Release: `redlock.release(lock, { retryCount: 0 })`, one attempt, like the other libraries.
// Several comma-separated URLs (or --redis-url repeated): Redlock over those independent masters
// (`new Redlock([client, ...])`, quorum floor(n/2)+1); one URL: a single server, quorum 1.
import { parseArgs } from "node:util";
import Redis from "ioredis";
import Redlock from "redlock";

const TTL_MS = 5000;
const GIVE_UP_AFTER_END_MS = 10_000;

const { values } = parseArgs({
  options: {
    concurrency: { type: "string", default: "16" },
    "duration-ms": { type: "string", default: "5000" },
    locks: { type: "string" },
    "redis-url": { type: "string", multiple: true, default: ["redis://127.0.0.1:6390"] },
    "retry-delay-ms": { type: "string", default: "5" },
    "retry-jitter-ms": { type: "string", default: "5" },
  },
  strict: true,
});

const int = (name, value) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) {
    console.error(`bench.mjs: --${name} needs a non-negative integer, got ${value}`);
    process.exit(2);
  }
  return n;
};
const concurrency = Math.max(1, int("concurrency", values.concurrency));
const durationMs = int("duration-ms", values["duration-ms"]);
const locks = Math.max(1, values.locks === undefined ? concurrency : int("locks", values.locks));
const retryDelay = int("retry-delay-ms", values["retry-delay-ms"]);
const retryJitter = int("retry-jitter-ms", values["retry-jitter-ms"]);

// Hard bound on the whole run, whatever happens to Redis.
setTimeout(() => {
  console.error("bench.mjs: run did not finish in time");
  process.exit(3);
}, durationMs + GIVE_UP_AFTER_END_MS + 5000).unref();

const urls = values["redis-url"]
  .flatMap((u) => u.split(","))
  .map((u) => u.trim())
  .filter((u) => u !== "");
if (urls.length === 0) {
  console.error("bench.mjs: --redis-url needs at least one URL");
  process.exit(2);
}
const clients = urls.map((url) => new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 }));
const disconnectAll = () => clients.forEach((c) => c.disconnect());
const redlock = new Redlock(clients, {
  retryCount: -1,
  retryDelay,
  retryJitter,
  automaticExtensionThreshold: 500,
});
// redlock emits every failed attempt ("resource locked") as an "error" event; without a listener
// Node would throw. Only unexpected errors are worth reporting.
let unexpectedErrors = 0;
redlock.on("error", (error) => {
  if (error && error.name === "ResourceLockedError") return;
  unexpectedErrors += 1;
  if (unexpectedErrors <= 3) console.error(`bench.mjs: redlock error: ${error}`);
});

let connectionErrors = 0;
for (const client of clients) {
  client.on("error", (error) => {
    if (connectionErrors++ === 0) console.error(`bench.mjs: redis: ${error.message}`);
  });
}
try {
  await Promise.all(clients.map((c) => c.connect()));
  // Load the scripts and warm the connection before the clock starts.
  await redlock.release(await redlock.acquire(["peerbench:node-redlock:warmup"], 1000, { retryCount: 3 }), {
    retryCount: 0,
  });
} catch (error) {
  console.error(`bench.mjs: cannot lock on ${urls.length} server(s) (${urls.join(",")}): ${error.message}`);
  disconnectAll();
  process.exit(1);
}

const runId = (Date.now() ^ process.pid).toString(16).slice(-8);
const holders = new Array(locks).fill(0);
let overlaps = 0;
const contended = locks < concurrency;
const latenciesUs = [];

const started = process.hrtime.bigint();
const stop = started + BigInt(durationMs) * 1_000_000n;
const giveUp = stop + BigInt(GIVE_UP_AFTER_END_MS) * 1_000_000n;

async function worker(i) {
  const index = i % locks;
  const key = `peerbench:node-redlock:${runId}:${index}`;
  while (process.hrtime.bigint() < stop) {
    const t0 = process.hrtime.bigint();
    const lock = await redlock.acquire([key], TTL_MS);
    if (holders[index]++ > 0) overlaps += 1;
    // Let the other workers run while this one holds the lock, or the check could never see an
    // overlap on a single-threaded event loop.
    if (contended) await new Promise((resolve) => setImmediate(resolve));
    // Leave before releasing: once the key is gone another worker may rightly take it.
    holders[index]--;
    await redlock.release(lock, { retryCount: 0 });
    const t1 = process.hrtime.bigint();
    latenciesUs.push(Number((t1 - t0) / 1000n));
    if (t1 > giveUp) throw new Error(`${key}: still running ${GIVE_UP_AFTER_END_MS} ms after the end`);
  }
}

try {
  await Promise.all(Array.from({ length: concurrency }, (_, i) => worker(i)));
} catch (error) {
  console.error(`bench.mjs: ${error}`);
  disconnectAll();
  process.exit(1);
}
const elapsedSec = Number(process.hrtime.bigint() - started) / 1e9;
disconnectAll();

latenciesUs.sort((a, b) => a - b);
const percentile = (p) =>
  latenciesUs.length === 0 ? 0 : latenciesUs[Math.round((latenciesUs.length - 1) * p)];
console.log(
  JSON.stringify({
    concurrency,
    locks,
    pairs: latenciesUs.length,
    pairs_per_sec: Math.round(latenciesUs.length / elapsedSec),
    p50_us: percentile(0.5),
    p99_us: percentile(0.99),
    overlaps,
  }),
);
