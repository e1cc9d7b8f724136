// The Node producer driver the conformance kit proves at the producer
// level: it reads one JSON request a line on stdin, carries it out with
// spool-client's Producer and writes one JSON answer a line on stdout (the
// protocol is in docs/conformance.md). It connects where SPOOL_NATS_URL
// points and ends when stdin closes.
//
//   spool-conformance --level producer -- node examples/node/conformance-producer.js

import readline from "node:readline";
import { connect } from "@nats-io/transport-node";
import { Producer, TaskFinishedError, TaskNotFoundError, UniqueConflictError } from "./index.js";
import { parseDuration } from "./lib/names.js";

const env = process.env;
const nc = await connect({ servers: (env.SPOOL_NATS_URL || env.NATS_URL || "nats://127.0.0.1:4222").split(","), name: "spool-conformance node producer" });
const producer = await Producer.connect(nc, { prefix: env.SPOOL_PREFIX || "spool" });
const ms = (d, fallback) => (d ? Number(parseDuration(d) / 1000000n) : fallback);

// failure is an error as the protocol's answer.
function failure(err) {
  let code = "error";
  if (err instanceof UniqueConflictError) code = "duplicate_unique";
  else if (err instanceof TaskFinishedError) code = "task_finished";
  else if (err instanceof TaskNotFoundError) code = "not_found";
  else if (err instanceof TypeError) code = "bad_request";
  else if (/did not finish within/.test(err.message)) code = "timeout";
  return { ok: false, code, error: err.message };
}

// found answers a document, or result_discarded for the marker of a
// discarded result.
function found(id, doc) {
  if (doc.result_discarded) return { ok: false, code: "result_discarded", error: `task ${id} completed; its result was discarded` };
  return { ok: true, found: true, result: doc };
}

async function serve(req) {
  switch (req.op) {
    case "enqueue": {
      const res = await producer.enqueue({
        type: req.type, id: req.id || undefined, priority: req.priority || undefined, payload: req.payload ?? "",
        delay: ms(req.delay, 0), maxRetries: req.max_retries ?? undefined, timeout: req.timeout || undefined,
        uniqueKey: req.unique_key || undefined, uniqueTTL: req.unique_ttl || undefined,
      });
      return { ok: true, id: res.id, ...(res.duplicate ? { duplicate: true } : {}) };
    }
    case "result": {
      const doc = await producer.result(req.id);
      return doc ? found(req.id, doc) : { ok: true };
    }
    case "wait":
      return found(req.id, await producer.wait(req.id, ms(req.timeout, 30000)));
    case "cancel":
      return { ok: true, found: true, result: await producer.cancel(req.id, { by: req.by ?? "", reason: req.reason ?? "" }) };
    case "replay":
      return { ok: true, id: (await producer.replay(req.seq)).id };
    default:
      return { ok: false, code: "bad_request", error: `unknown op ${JSON.stringify(req.op)}` };
  }
}

for await (const line of readline.createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  let answer;
  try {
    answer = await serve(JSON.parse(line));
  } catch (err) {
    answer = err instanceof SyntaxError ? { ok: false, code: "bad_request", error: err.message } : failure(err);
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
await nc.drain();
