// A Spool producer in Node.js: enqueues tasks, waits for their results,
// checks the output comes back byte for byte, reads dead letters, and runs
// a delayed task, a unique key and two cancels through spool-client. It
// prints one JSON report on stdout and exits non-zero when anything differs.
//
//   NATS_URL=nats://127.0.0.1:4222 node producer.js
//
// It expects a fleet serving demo.echo (Go: spool-consumer --demo returns
// the payload) and node.* (handler.js, routed by spool-consumer with
// SPOOL_REMOTE_ROUTES='node.>=spool.remote.{type}'): see
// docs/guide/remote-handlers.md. tests/nodeexample runs it against such a fleet.

import { connect } from "@nats-io/transport-node";
import { Producer, TaskFinishedError, UniqueConflictError, output } from "./index.js";

const url = process.env.NATS_URL || "nats://127.0.0.1:4222";
const run = process.env.SPOOL_EXAMPLE_RUN || String(Date.now()); // keeps ids unique across runs

const all = Uint8Array.from({ length: 256 }, (_, i) => i);
const invalidUTF8 = Uint8Array.from([0x68, 0x69, 0xff, 0xfe, 0xc3, 0x28, 0x00]);
const echoPayload = new Uint8Array([...invalidUTF8, ...all]);

const nc = await connect({ servers: url.split(","), name: "spool-node-producer" });
const spool = await Producer.connect(nc);
const report = { ok: true, tasks: [], checks: {} };
// check records one named check of the report.
const check = (name, ok) => {
  report.checks[name] = ok;
  report.ok &&= ok;
};
try {
  const tasks = [
    { type: "demo.echo", id: `node-echo-${run}`, payload: echoPayload, priority: "high", want: echoPayload },
    { type: "node.bytes", id: `node-bytes-${run}`, want: all },
  ];
  for (const t of tasks) {
    const ack = await spool.enqueue(t);
    t.seq = ack.seq;
  }
  for (const t of tasks) {
    const doc = await spool.wait(t.id);
    const out = output(doc);
    const same = doc.state === "completed" && Buffer.compare(Buffer.from(out), Buffer.from(t.want)) === 0;
    report.ok &&= same;
    report.tasks.push({ id: t.id, type: t.type, seq: t.seq, state: doc.state, worker: doc.worker, result_encoding: doc.result_encoding ?? null, output_base64: Buffer.from(out).toString("base64"), identical: same });
  }

  // A task its handler refuses for good: dead at once, and its dead letter
  // carries why.
  const failID = `node-fail-${run}`;
  await spool.enqueue({ type: "node.fail", id: failID, payload: '{"why":"to see a dead letter"}', maxRetries: 2 });
  const dead = await spool.wait(failID);
  const letter = await spool.deadLetter("normal", "node.fail");
  const deadOK = dead.state === "dead" && dead.reason === "permanent" && letter.taskId === failID && letter.reason === "permanent";
  report.ok &&= deadOK;
  report.dead = { id: failID, state: dead.state, reason: dead.reason, error: dead.error, letter: { ...letter, payload: new TextDecoder().decode(letter.payload) }, ok: deadOK };
  const listed = await spool.deadLetters({ type: "node.fail" });
  check("dead letters listed", listed.some((l) => l.taskId === failID && l.reason === "permanent"));

  // A delayed task is scheduled, read from its schedule, until it fires;
  // then it runs.
  const delayedID = `node-delayed-${run}`;
  const delayed = await spool.enqueue({ type: "demo.echo", id: delayedID, payload: "later", delay: 1500 });
  const pending = await spool.result(delayedID);
  check("delayed: scheduled before it fires", pending?.state === "scheduled" && pending.type === "demo.echo" &&
    Date.parse(pending.next_attempt_at) === delayed.scheduledAt.getTime());
  const fired = await spool.wait(delayedID);
  check("delayed: runs after its time", fired.state === "completed" && Date.parse(fired.started_at) >= delayed.scheduledAt.getTime());

  // A unique key refuses a second task while the first holds it (delayed,
  // so it cannot complete before), and is free again once the worker
  // completed the first.
  const unique = { type: "demo.echo", payload: "once", uniqueKey: `node-key-${run}`, uniqueTTL: "1m" };
  await spool.enqueue({ ...unique, id: `node-unique-1-${run}`, delay: 3000 });
  const refused = await spool.enqueue({ ...unique, id: `node-unique-2-${run}` }).then(() => null, (err) => err);
  check("unique: a second task is refused", refused instanceof UniqueConflictError && refused.holder === `node-unique-1-${run}`);
  await spool.wait(`node-unique-1-${run}`);
  // The worker releases the key after storing the completed document, so
  // an enqueue right after seeing it may still be refused for a moment.
  let again = null;
  for (const end = Date.now() + 5000; !again; ) {
    again = await spool.enqueue({ ...unique, id: `node-unique-3-${run}` }).catch((err) => {
      if (!(err instanceof UniqueConflictError) || Date.now() > end) throw err;
      return new Promise((r) => setTimeout(() => r(null), 50));
    });
  }
  check("unique: free again after completion", (await spool.wait(again.id)).state === "completed");

  // Cancel: a pending schedule is cancelled, a finished task is not.
  const cancelID = `node-cancel-${run}`;
  await spool.enqueue({ type: "demo.echo", id: cancelID, delay: 60000 });
  const cancelled = await spool.cancel(cancelID, { by: "node", reason: "not needed" });
  const stored = await spool.result(cancelID);
  check("cancel: a delayed task", cancelled.state === "cancelled" && stored?.state === "cancelled" && stored.cancelled_by === "node");
  const late = await spool.cancel(delayedID).then(() => null, (err) => err);
  check("cancel: a completed task is finished", late instanceof TaskFinishedError);
} catch (err) {
  report.ok = false;
  report.error = String(err.stack || err);
} finally {
  await nc.drain();
}
console.log(JSON.stringify(report));
process.exit(report.ok ? 0 : 1);
