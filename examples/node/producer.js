// A Spool producer in Node.js: enqueues tasks, waits for their results,
// checks the output comes back byte for byte, and reads a dead letter. It
// prints one JSON report on stdout and exits non-zero when anything differs.
//
//   NATS_URL=nats://127.0.0.1:4222 node producer.js
//
// It expects a fleet serving demo.echo (Go: spool-consumer --demo returns
// the payload) and node.* (handler.js, routed by spool-consumer with
// SPOOL_REMOTE_ROUTES='node.>=spool.remote.{type}'): see
// docs/guide/remote-handlers.md. tests/nodeexample runs it against such a fleet.

import { connect } from "@nats-io/transport-node";
import { deadLetter, enqueue, open, output, wait } from "./lib/spool.js";

const url = process.env.NATS_URL || "nats://127.0.0.1:4222";
const run = process.env.SPOOL_EXAMPLE_RUN || String(Date.now()); // keeps ids unique across runs

const all = Uint8Array.from({ length: 256 }, (_, i) => i);
const invalidUTF8 = Uint8Array.from([0x68, 0x69, 0xff, 0xfe, 0xc3, 0x28, 0x00]);
const echoPayload = new Uint8Array([...invalidUTF8, ...all]);

const nc = await connect({ servers: url, name: "spool-node-producer" });
const spool = await open(nc);
const report = { ok: true, tasks: [] };
try {
  const tasks = [
    { type: "demo.echo", id: `node-echo-${run}`, payload: echoPayload, priority: "high", want: echoPayload },
    { type: "node.bytes", id: `node-bytes-${run}`, want: all },
  ];
  for (const t of tasks) {
    const ack = await enqueue(spool, t);
    t.seq = ack.seq;
  }
  for (const t of tasks) {
    const doc = await wait(spool, t.id);
    const out = output(doc);
    const same = doc.state === "completed" && Buffer.compare(Buffer.from(out), Buffer.from(t.want)) === 0;
    report.ok &&= same;
    report.tasks.push({ id: t.id, type: t.type, seq: t.seq, state: doc.state, worker: doc.worker, result_encoding: doc.result_encoding ?? null, output_base64: Buffer.from(out).toString("base64"), identical: same });
  }

  // A task its handler refuses for good: dead at once, and its dead letter
  // carries why.
  const failID = `node-fail-${run}`;
  await enqueue(spool, { type: "node.fail", id: failID, payload: '{"why":"to see a dead letter"}', maxRetries: 2 });
  const dead = await wait(spool, failID);
  const letter = await deadLetter(spool, "normal", "node.fail");
  const deadOK = dead.state === "dead" && dead.reason === "permanent" && letter.taskId === failID && letter.reason === "permanent";
  report.ok &&= deadOK;
  report.dead = { id: failID, state: dead.state, reason: dead.reason, error: dead.error, letter: { ...letter, payload: new TextDecoder().decode(letter.payload) }, ok: deadOK };
} catch (err) {
  report.ok = false;
  report.error = String(err.stack || err);
} finally {
  await nc.drain();
}
console.log(JSON.stringify(report));
process.exit(report.ok ? 0 : 1);
