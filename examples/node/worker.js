// A native Spool worker in Node.js serving the demo handlers below for the
// type patterns in SPOOL_TYPES (comma-separated, default "node.>"). The
// handler is picked by the type's last token:
//
//   echo    the payload back, byte for byte
//   who     {"worker":<name>,"type":<type>,"attempt":<n>}: who ran it
//   flaky   fails until attempt {"ok_at":n} (payload, default 2)
//   fail    fails for good (permanent)
//   error   always fails, so the task is dead after its retries
//   sleep   waits {"ms":n} (payload), stopping early when cancelled
//
//   NATS_URL=nats://127.0.0.1:4222 SPOOL_TYPES='node.>' node worker.js
//
// It prints one JSON line when ready and one per task it starts.

import { connect } from "@nats-io/transport-node";
import { Worker, permanent } from "./index.js";

const env = process.env;
const types = (env.SPOOL_TYPES || "node.>").split(",").map((s) => s.trim()).filter(Boolean);
const name = env.SPOOL_WORKER_NAME || undefined;
const json = (payload) => (payload.length ? JSON.parse(new TextDecoder().decode(payload)) : {});

const demo = {
  echo: (t) => t.payload,
  who: (t) => ({ worker: worker.name, type: t.type, attempt: t.attempt }),
  flaky: (t) => {
    if (t.attempt < (json(t.payload).ok_at ?? 2)) throw new Error(`not yet (attempt ${t.attempt} of ${t.maxAttempts})`);
    return { attempt: t.attempt, by: "node" };
  },
  fail: () => {
    throw permanent(new Error("node refuses this task"));
  },
  error: (t) => {
    throw new Error(`failing attempt ${t.attempt}`);
  },
  sleep: (t) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => resolve({ slept: json(t.payload).ms }), json(t.payload).ms ?? 1000);
      t.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(t.signal.reason);
      });
    }),
};

function handle(task) {
  console.log(JSON.stringify({ running: task.id, type: task.type, attempt: task.attempt, at: new Date().toISOString() }));
  const fn = demo[task.type.split(".").at(-1)];
  if (!fn) throw permanent(new Error(`the node worker has no handler for ${task.type}`));
  return fn(task);
}

const nc = await connect({ servers: (env.NATS_URL || "nats://127.0.0.1:4222").split(","), name: "spool-node-worker" });
const worker = new Worker(nc, {
  handlers: Object.fromEntries(types.map((p) => [p, handle])),
  name,
  prefix: env.SPOOL_PREFIX || "spool",
  concurrency: Number(env.SPOOL_CONCURRENCY || 4),
  retryBase: Number(env.SPOOL_RETRY_BASE_MS || 1000),
  retryMax: Number(env.SPOOL_RETRY_MAX_MS || 300000),
  processingDelay: Number(env.SPOOL_PROCESSING_DELAY_MS ?? 1000),
});
const started = await worker.start();
console.log(JSON.stringify({ ready: true, worker: worker.name, types, ...started }));

let stopping = false;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    if (stopping) return;
    stopping = true;
    await worker.stop(Number(env.SPOOL_SHUTDOWN_GRACE_MS || 5000));
    await nc.drain();
  });
}
await nc.closed();
