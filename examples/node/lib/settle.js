// Settling an attempt (docs/contract.md, "Working a task" step 4, "Dead
// letters", "Cancelling a task"): the result document is stored before the
// ack, the dead letter before the term, and a cancellation stored meanwhile
// always wins.

import { headers } from "@nats-io/transport-node";
import { nowNanos, parseTime, rfc3339 } from "./names.js";
import { encodeDoc } from "./output.js";
import { conflict, tries } from "./store.js";

const now = () => rfc3339(nowNanos());
const oneLine = (s) => String(s ?? "").replace(/[\r\n]+/g, " ");

/** doc is the result document of an attempt in a state. */
export function doc(w, a, state) {
  const d = { id: a.id, type: a.type, priority: a.priority, state, attempts: a.attempt, enqueued_at: rfc3339(a.enq) };
  if (a.handedBack !== null) d.handed_back_at = rfc3339(a.handedBack);
  if (a.startedAt) d.started_at = a.startedAt;
  d.worker = w.name;
  if (a.traceparent) d.traceparent = a.traceparent;
  if (a.snoozes) d.snoozes = a.snoozes;
  return d;
}

/** sameMessage reports whether a stored document belongs to this very message of the task. */
export function sameMessage(a, stored) {
  const enq = parseTime(stored.enqueued_at);
  const back = stored.handed_back_at === undefined ? null : parseTime(stored.handed_back_at);
  return enq !== null && enq === a.enq && back === a.handedBack;
}

/** ack settles the message on its ack subject and waits for the server's confirmation. */
export async function ack(w, a, verb) {
  a.settled = true;
  clearTimeout(a.beat);
  try {
    await tries((timeout) => w.nc.request(a.m.reply, verb, { timeout }), 5000);
  } catch (err) {
    w.log(`task ${a.id}: ${verb.split(" ")[0]} not confirmed: ${err.message}`);
  }
}

/** nak hands the task back with a delay in milliseconds. */
export function nak(w, a, delayMs) {
  a.settled = true;
  clearTimeout(a.beat);
  w.nc.publish(a.m.reply, delayMs > 0 ? `-NAK {"delay":${Math.round(delayMs) * 1000000}}` : "-NAK");
}

// storeFinal writes the document an attempt ends with (completed, the
// marker of a discarded result, dead, retrying) over the revision the
// attempt read. On a lost race it reads again: this very document stored
// by an earlier try counts as stored, a cancelled document makes it yield,
// the attempt's own processing state is written over, and anything else
// is written over unless a cancellation is stored. "stored" or "cancelled".
async function storeFinal(w, a, d, value, marker) {
  const text = encodeDoc(d, value);
  const budget = Math.max(10000, 0.75 * a.lane.ackWaitMs);
  for (let i = 0; i < 5; i++) {
    try {
      if (marker) await w.store.putDiscardedAt(a.id, a.rev, budget);
      else await w.store.putAt(a.id, text, a.rev, budget);
      w.events && w.store.event(d.state, marker ? { ...d, result_discarded: true } : d, marker ? undefined : text);
      return "stored";
    } catch (err) {
      if (!conflict(err)) throw err;
    }
    const read = await w.store.read(a.id, budget);
    const r = read.doc;
    const same = r && r.attempts === d.attempts && sameMessage(a, r);
    if (same && r.state === d.state && r.finished_at === d.finished_at && d.finished_at !== undefined) return "stored";
    if (r?.state === "cancelled") return "cancelled";
    const ownProcessing = same && r.state === "processing" && r.progress === undefined;
    if (!ownProcessing && (w.cancelled.has(a.id) || (await w.store.cancellation(a.id)))) return "cancelled";
    a.rev = read.rev;
  }
  throw new Error(`task ${a.id}: its result kept changing while storing ${d.state}`);
}

/** complete stores the completed document (or the marker), releases the unique key and acks. */
export async function complete(w, a, value) {
  const d = { ...doc(w, a, "completed"), finished_at: now() };
  try {
    if ((await storeFinal(w, a, d, value, a.discard)) === "cancelled") return cancelled(w, a);
    await w.store.releaseUnique(a.uniqueKey, a.id);
  } catch (err) {
    w.log(`task ${a.id}: storing its result failed, it runs again: ${err.message}`);
    return nak(w, a, backoff(w, a.attempt));
  }
  await ack(w, a, "+ACK");
}

/**
 * retry stores the retrying document over the revision read and NAKs with
 * the backoff, or the delay the handler asked for. A cancellation stored
 * meanwhile ends the task cancelled instead.
 */
export async function retry(w, a, err) {
  const delay = Math.round(err?.retryAfter ?? backoff(w, a.attempt));
  const d = { ...doc(w, a, "retrying"), error: oneLine(err?.message ?? err), next_attempt_at: rfc3339(BigInt(Date.now() + delay) * 1000000n) };
  try {
    if ((await storeFinal(w, a, d)) === "cancelled") return cancelled(w, a);
  } catch (e) {
    w.log(`task ${a.id}: writing its retrying state: ${e.message}`);
  }
  nak(w, a, delay);
}

/** backoff is min(base·2^(attempt-1), max) plus up to 20% jitter, in milliseconds. */
export function backoff(w, attempt) {
  const d = Math.min(w.retryBase * 2 ** Math.max(0, attempt - 1), w.retryMax);
  return d + Math.random() * 0.2 * d;
}

/**
 * deadLetter publishes the dead letter and waits for its ack, stores the
 * dead document, releases the unique key and terminates the task.
 */
export async function deadLetter(w, a, reason, message) {
  const n = w.store.names;
  const h = headers();
  const orig = a.m.headers;
  for (const k of orig?.keys() ?? []) {
    if (k.toLowerCase().startsWith("nats-")) continue;
    for (const v of orig.values(k)) h.append(k, v);
  }
  if (!h.has("Spool-Task-Id")) h.set("Spool-Task-Id", a.id);
  const failedAt = now();
  h.set("Spool-Error", oneLine(message));
  h.set("Spool-Reason", reason);
  h.set("Spool-Attempts", String(a.attempt)); // the attempt number, as the Go worker writes it
  h.set("Spool-Failed-At", failedAt);
  h.set("Spool-Original-Subject", a.m.subject);
  h.set("Spool-Original-Seq", String(a.md.streamSeq));
  const parsed = n.parseTaskSubject(a.m.subject);
  const subject = parsed ? n.dlqSubject(parsed.priority, parsed.type) : n.dlqSubject(a.priority, "unknown");
  const d = { ...doc(w, a, "dead"), error: oneLine(message), reason, finished_at: failedAt };
  try {
    await tries((timeout) => w.store.js.publish(subject, a.m.data, { msgID: `dlq-${a.md.stream}-${a.md.streamSeq}`, headers: h, expect: { streamName: n.dlqStream }, timeout }), Math.max(10000, 0.75 * a.lane.ackWaitMs));
    if ((await storeFinal(w, a, d)) === "cancelled") return cancelled(w, a);
    await w.store.releaseUnique(a.uniqueKey, a.id);
  } catch (err) {
    w.log(`task ${a.id}: dead-lettering failed, it runs again: ${err.message}`);
    return nak(w, a, backoff(w, a.attempt));
  }
  w.log(`task ${a.id} dead: ${reason}: ${oneLine(message)}`);
  await ack(w, a, `+TERM ${reason}`);
}

/**
 * cancelled ends a cancelled task: the cancelled document unless it is
 * stored already, the unique key released, the task terminated.
 */
export async function cancelled(w, a) {
  const c = w.cancelled.get(a.id) ?? (await w.store.cancellation(a.id).catch(() => null)) ?? {};
  try {
    for (let i = 0; i < 5; i++) {
      const read = await w.store.read(a.id);
      if (read.doc?.state === "cancelled") break;
      const d = { ...doc(w, a, "cancelled"), cancelled_by: c.by ?? "", cancel_reason: c.reason ?? "", finished_at: now() };
      const text = encodeDoc(d);
      try {
        await w.store.putAt(a.id, text, read.rev);
        w.events && w.store.event("cancelled", d, text);
        break;
      } catch (err) {
        if (!conflict(err)) throw err;
      }
    }
    await w.store.releaseUnique(a.uniqueKey, a.id);
  } catch (err) {
    w.log(`task ${a.id}: settling its cancel: ${err.message}`);
  }
  await ack(w, a, "+TERM cancelled");
}

/** handBack returns an unfinished task at shutdown: pending, then a NAK without delay. */
export function handBack(w, a) {
  const d = { ...doc(w, a, "pending"), error: "handed back unfinished at worker shutdown" };
  w.store.putUnacked(a.id, encodeDoc(d));
  nak(w, a, 0);
}

/**
 * storedAlready settles a redelivery whose completed or dead document of
 * this very message is stored (its ack or term was lost): the unique key
 * is released and the stored outcome stands. It reports whether it did.
 */
export async function storedAlready(w, a, stored) {
  if (!stored || !sameMessage(a, stored) || (stored.state !== "completed" && stored.state !== "dead")) return false;
  await w.store.releaseUnique(a.uniqueKey, a.id).catch((err) => w.log(`task ${a.id}: releasing its unique key: ${err.message}`));
  await ack(w, a, stored.state === "dead" ? `+TERM ${stored.reason}` : "+ACK");
  return true;
}
