// Spool's wire contract (docs/contract.md) for Node.js, with the official
// @nats-io packages: enqueue a task, read and wait for its result document,
// decode the handler's output byte for byte, read a dead letter. Nothing
// here comes from the Go code; the contract is all it follows.

import { headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";

export const PRIORITIES = ["critical", "high", "normal", "low", "idle"];
const TERMINAL = new Set(["completed", "dead"]);

// Names derive from the prefix ("spool" unless SPOOL_PREFIX says otherwise).
export function names(prefix = "spool") {
  return {
    taskSubject: (priority, type) => `${prefix}.tasks.${priority}.${type}`,
    dlqSubject: (priority, type) => `${prefix}.dlq.${priority}.${type}`,
    dlqStream: `${prefix.toUpperCase()}_DLQ`,
    resultsBucket: `${prefix}_results`,
  };
}

// Spool opens the JetStream and KV handles once per connection.
export async function open(nc, prefix = "spool") {
  const n = names(prefix);
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const results = await new Kvm(nc).open(n.resultsBucket);
  return { nc, js, jsm, results, names: n };
}

// enqueue publishes one task through JetStream and returns the publish ack.
// The id goes in Nats-Msg-Id (dedup within the duplicate window) and
// Spool-Task-Id; maxRetries and timeout become Spool-Max-Retries and
// Spool-Timeout. payload is a Uint8Array or a string.
export async function enqueue(spool, { type, id, payload = new Uint8Array(), priority = "normal", maxRetries, timeout, extra = {} }) {
  if (!PRIORITIES.includes(priority)) throw new Error(`priority ${JSON.stringify(priority)} is not one of ${PRIORITIES.join(", ")}`);
  const h = headers();
  h.set("Spool-Task-Id", id);
  if (maxRetries !== undefined) h.set("Spool-Max-Retries", String(maxRetries));
  if (timeout !== undefined) h.set("Spool-Timeout", timeout);
  for (const [k, v] of Object.entries(extra)) h.set(k, v);
  return spool.js.publish(spool.names.taskSubject(priority, type), payload, { msgID: id, headers: h });
}

// result reads the result document of id; null when there is none yet.
export async function result(spool, id) {
  const e = await spool.results.get(id);
  if (!e || e.operation !== "PUT") return null;
  return e.json();
}

// wait watches the document of id until it is completed or dead, or until
// ms pass (then it throws).
export async function wait(spool, id, ms = 20000) {
  const watch = await spool.results.watch({ key: id });
  const timer = setTimeout(() => watch.stop(), ms);
  try {
    for await (const e of watch) {
      if (e.operation !== "PUT") continue;
      const doc = e.json();
      if (TERMINAL.has(doc.state)) return doc;
    }
  } finally {
    clearTimeout(timer);
    watch.stop();
  }
  throw new Error(`task ${id} did not finish within ${ms} ms`);
}

// output returns the handler's output as bytes, as docs/contract.md says:
// the string's UTF-8 when result_encoding is "text", base64-decoded when it
// is "base64", else the JSON value serialised again (JSON output;
// byte-identical when the handler wrote compact JSON), empty when there is
// no result.
export function output(doc) {
  if (doc.result === undefined) return new Uint8Array();
  switch (doc.result_encoding) {
    case undefined:
      return new TextEncoder().encode(JSON.stringify(doc.result));
    case "text":
      return new TextEncoder().encode(doc.result);
    case "base64":
      return new Uint8Array(Buffer.from(doc.result, "base64"));
    default:
      throw new Error(`task ${doc.id}: unknown result_encoding ${JSON.stringify(doc.result_encoding)}`);
  }
}

// deadLetter reads the latest dead letter of a priority and type: its
// Spool-* headers and payload.
export async function deadLetter(spool, priority, type) {
  const m = await spool.jsm.streams.getMessage(spool.names.dlqStream, { last_by_subj: spool.names.dlqSubject(priority, type) });
  const header = (k) => m.header.get(k);
  return {
    seq: m.seq,
    subject: m.subject,
    taskId: header("Spool-Task-Id"),
    reason: header("Spool-Reason"),
    error: header("Spool-Error"),
    attempts: Number(header("Spool-Attempts")),
    originalSubject: header("Spool-Original-Subject"),
    payload: m.data,
  };
}
