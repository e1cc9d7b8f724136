// The Node worker the conformance kit proves at the core level:
// spool-client's Worker serving the conformance handler types, configured
// by the environment the kit gives every worker under test (SPOOL_NATS_URL
// and the SPOOL_* settings, docs/conformance.md).
//
//   spool-conformance --level core -- node examples/node/conformance.js

import { connect } from "@nats-io/transport-node";
import { Worker, permanent, retryAfter } from "./index.js";
import { parseDuration } from "./lib/names.js";

const env = process.env;
const ms = (name, fallback) => Number(parseDuration(env[name] || fallback) / 1000000n);
const json = (t) => {
  try {
    return JSON.parse(new TextDecoder().decode(t.payload));
  } catch (err) {
    throw permanent(new Error(`payload: ${err.message}`));
  }
};

const handlers = {
  "conformance.echo": (t) => t.payload,
  "conformance.fail": (t) => {
    const p = json(t);
    if (t.attempt < p.succeed_at) {
      const err = new Error(`conformance failure on attempt ${t.attempt}`);
      throw p.retry_after_ms > 0 ? retryAfter(err, p.retry_after_ms) : err;
    }
    return { attempt: t.attempt };
  },
  "conformance.fatal": () => {
    throw permanent(new Error("conformance fatal failure"));
  },
  "conformance.slow": (t) =>
    new Promise((resolve, reject) => {
      const n = json(t).ms;
      const timer = setTimeout(() => resolve({ slept_ms: n }), n);
      t.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(new Error(`interrupted: ${t.signal.reason?.message ?? t.signal.reason}`));
      });
    }),
  "conformance.crash": (t) => {
    if (t.attempt < json(t).succeed_at) process.exit(3); // the crash the case asks for: no settling, no ack
    return { attempt: t.attempt };
  },
};

const nc = await connect({ servers: (env.SPOOL_NATS_URL || env.NATS_URL || "nats://127.0.0.1:4222").split(","), name: "spool-conformance node worker" });
const worker = new Worker(nc, {
  handlers,
  name: env.SPOOL_WORKER_NAME || "conformance-worker",
  prefix: env.SPOOL_PREFIX || "spool",
  concurrency: Number(env.SPOOL_CONCURRENCY || 2),
  maxRetries: Number(env.SPOOL_DEFAULT_MAX_RETRIES || 3),
  retryBase: ms("SPOOL_RETRY_BASE", "100ms"),
  retryMax: ms("SPOOL_RETRY_MAX", "1s"),
  processingDelay: ms("SPOOL_PROCESSING_DELAY", "0s"),
});
await worker.start();
console.error(JSON.stringify({ ready: true, worker: worker.name, mode: worker.mode }));

let stopping = false;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    if (stopping) return;
    stopping = true;
    await worker.stop(ms("SPOOL_SHUTDOWN_TIMEOUT", "3s"));
    await nc.drain();
  });
}
await nc.closed();
