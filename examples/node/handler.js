// A Spool remote handler service in Node.js. spool-consumer sends each
// attempt of the task types routed to it (SPOOL_REMOTE_ROUTES, e.g.
// "node.>=spool.remote.{type}": remote handlers live under spool.remote.>,
// which deploy/'s auth roles allow) as a request on a subject that
// SPOOL_HANDLER_SUBJECT matches (default spool.remote.node.>); the reply
// is the outcome (docs/contract.md, "Remote handlers"):
//
//   success    no Spool-Error header; the body is the result, any bytes
//   retry      Spool-Error: <message>
//   dead now   Spool-Error plus Spool-Permanent: true
//
// Run several copies: they share the subject through a queue group.
//
//   NATS_URL=nats://127.0.0.1:4222 node handler.js

import { connect, headers } from "@nats-io/transport-node";

const url = process.env.NATS_URL || "nats://127.0.0.1:4222";
const subject = process.env.SPOOL_HANDLER_SUBJECT || "spool.remote.node.>";
const queue = process.env.SPOOL_HANDLER_QUEUE || "spool-node-handlers";

// Handlers by task type: (payload, task) => bytes, or throw. An error with
// permanent: true dead-letters the task at once.
const handlers = {
  // The payload back, byte for byte.
  "node.echo": (payload) => payload,
  // Every byte value once: binary output.
  "node.bytes": () => Uint8Array.from({ length: 256 }, (_, i) => i),
  // Fails the first attempt, succeeds on a retry with JSON output.
  "node.flaky": (_, task) => {
    if (task.attempt < 2) throw new Error(`not yet (attempt ${task.attempt} of ${task.maxAttempts})`);
    return new TextEncoder().encode(JSON.stringify({ attempt: task.attempt, by: "node" }));
  },
  // Always refuses, permanently.
  "node.fail": () => {
    throw Object.assign(new Error("node refuses this task"), { permanent: true });
  },
};

function permanent(message) {
  return Object.assign(new Error(message), { permanent: true });
}

async function serve(m) {
  const h = m.headers;
  const task = {
    id: h?.get("Spool-Task-Id"),
    type: h?.get("Spool-Task-Type"),
    priority: h?.get("Spool-Priority"),
    attempt: Number(h?.get("Spool-Attempt") || 1),
    maxAttempts: Number(h?.get("Spool-Max-Attempts") || 1),
    deadline: h?.get("Spool-Deadline") ? Date.parse(h.get("Spool-Deadline")) : Infinity,
  };
  const reply = headers();
  let body = new Uint8Array();
  try {
    const handler = handlers[task.type];
    if (!handler) throw permanent(`the node handler has no type ${task.type}`);
    body = await handler(m.data, task);
  } catch (err) {
    // Headers are single-line: keep the first line of the message.
    reply.set("Spool-Error", String(err.message || err).split("\n")[0] || "failed");
    if (err.permanent) reply.set("Spool-Permanent", "true");
  }
  if (Date.now() > task.deadline) return; // the worker stopped waiting: a late reply is dropped anyway
  m.respond(body, { headers: reply });
}

const nc = await connect({ servers: url.split(","), name: "spool-node-handler" });
const sub = nc.subscribe(subject, { queue });
await nc.flush();
console.log(JSON.stringify({ ready: true, subject, queue, types: Object.keys(handlers) }));

for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => nc.drain());
for await (const m of sub) {
  serve(m).catch((err) => console.error("serving", m.subject, err));
}
await nc.closed();
