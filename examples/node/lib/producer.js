// A Spool producer: enqueue, read and wait for results, cancel, read dead
// letters (docs/contract.md: "Tasks", "Delayed tasks", "Unique keys",
// "Results bucket", "Cancelling a task", "Dead letters").

import { headers } from "@nats-io/transport-node";
import { PRIORITIES, nowNanos, parseDuration, parseTime, rfc3339, uniqueKVKey, validateID, validateType } from "./names.js";
import { encodeDoc } from "./output.js";
import { Store, apiCode, conflict, isTerminal, tries, watch } from "./store.js";

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** newID makes a 26-character id in the ULID layout: 48 bits of milliseconds, 80 random bits. */
export function newID() {
  let t = BigInt(Date.now());
  let n = (t << 80n) | BigInt("0x" + Buffer.from(crypto.getRandomValues(new Uint8Array(10))).toString("hex"));
  let s = "";
  for (let i = 0; i < 26; i++, n >>= 5n) s = CROCKFORD[Number(n & 31n)] + s;
  return s;
}

/** The error of a cancel that came too late (the task is completed, dead or cancelled). */
export class TaskFinishedError extends Error {}
/** The error of a cancel of a task found nowhere. */
export class TaskNotFoundError extends Error {}
/** The error of an enqueue refused because another task holds its unique key. */
export class UniqueConflictError extends Error {
  constructor(key, holder) {
    super(`unique key ${JSON.stringify(key)} is held by task ${holder}`);
    this.holder = holder;
  }
}

function check(cond, message) {
  if (!cond) throw new TypeError(message);
}

export class Producer {
  /** @param {Store} store */
  constructor(store) {
    this.store = store;
  }

  /** connect opens a producer on a connection. */
  static async connect(nc, { prefix = "spool" } = {}) {
    return new Producer(await Store.open(nc, prefix));
  }

  /** @param {import("../index.js").EnqueueOptions} t */
  async enqueue(t) {
    const n = this.store.names;
    const id = t.id ?? newID();
    const priority = t.priority ?? "normal";
    const e = validateType(t.type) || validateID(id);
    check(!e, e);
    check(PRIORITIES.includes(priority), `priority ${JSON.stringify(priority)} is not one of ${PRIORITIES.join(", ")}`);
    check(t.maxRetries === undefined || (Number.isInteger(t.maxRetries) && t.maxRetries >= 0 && t.maxRetries <= 1000), "maxRetries is a whole number from 0 to 1000");
    if (t.timeout !== undefined) parseDuration(t.timeout);
    check(!t.uniqueKey === !t.uniqueTTL, "uniqueKey and uniqueTTL go together");
    if (t.uniqueTTL) check(parseDuration(t.uniqueTTL) >= 1000000000n, "uniqueTTL is at least 1s");
    check(t.result === undefined || t.result === "keep" || t.result === "discard", 'result is "keep" or "discard"');
    const h = headers();
    for (const [k, v] of Object.entries(t.headers ?? {})) {
      check(!/^(nats-|spool-)/i.test(k) && !/[\r\n]/.test(v), `header ${k}: names starting with Nats- or Spool- and values with CR or LF are Spool's`);
      h.set(k, v);
    }
    h.set("Spool-Task-Id", id);
    if (t.maxRetries !== undefined) h.set("Spool-Max-Retries", String(t.maxRetries));
    if (t.timeout !== undefined) h.set("Spool-Timeout", t.timeout);
    if (t.result) h.set("Spool-Result", t.result);
    if (t.uniqueKey) {
      h.set("Spool-Unique-Key", t.uniqueKey);
      h.set("Spool-Unique-TTL", t.uniqueTTL);
    }
    const at = t.at ?? (t.delay ? new Date(Date.now() + t.delay) : undefined);
    const claimed = t.uniqueKey ? await this.#claim(t.uniqueKey, t.uniqueTTL, id) : 0;
    try {
      if (at && at.getTime() > Date.now()) {
        h.set("Nats-Schedule", `@at ${rfc3339(BigInt(at.getTime()) * 1000000n)}`);
        h.set("Nats-Schedule-Target", n.taskSubject(priority, t.type));
        const ack = await tries((timeout) => this.store.js.publish(n.schedSubject(id), t.payload ?? new Uint8Array(), { msgID: id, headers: h, timeout }));
        return { id, seq: ack.seq, duplicate: ack.duplicate, scheduledAt: at };
      }
      const ack = await tries((timeout) => this.store.js.publish(n.taskSubject(priority, t.type), t.payload ?? new Uint8Array(), { msgID: id, headers: h, timeout }));
      return { id, seq: ack.seq, duplicate: ack.duplicate };
    } catch (err) {
      if (claimed && apiCode(err) !== 0) await this.store.unique.delete(uniqueKVKey(t.uniqueKey), { previousSeq: claimed }).catch(() => {});
      throw err;
    }
  }

  // claim takes a unique key for task id: a create of its key with a TTL,
  // over the delete marker a released key leaves. It returns the key's
  // revision when this call stored it, 0 for a retried enqueue.
  async #claim(key, ttl, id) {
    const n = this.store.names;
    const subject = `$KV.${n.uniqueBucket}.${uniqueKVKey(key)}`;
    for (let rev = 0, i = 0; i < 5; i++) {
      try {
        const ack = await tries((timeout) => this.store.js.publish(subject, id, { expect: { lastSubjectSequence: rev }, ttl, timeout }));
        return ack.seq;
      } catch (err) {
        if (!conflict(err)) throw err;
      }
      const m = await tries(() => this.store.jsm.streams.getMessage(`KV_${n.uniqueBucket}`, { last_by_subj: subject }));
      if (!m) rev = 0;
      else if (m.data.length === 0) rev = m.seq; // a released or expired key's marker
      else if (new TextDecoder().decode(m.data) === id) return 0;
      else throw new UniqueConflictError(key, new TextDecoder().decode(m.data));
    }
    throw new Error(`unique key ${JSON.stringify(key)} kept changing while claiming it`);
  }

  /**
   * result reads a task's document: null when there is none, state
   * "scheduled" with next_attempt_at for a pending schedule, and
   * {state:"completed", result_discarded:true} for a discarded result.
   */
  async result(id) {
    const { doc, discarded, invalid } = await this.store.read(id);
    if (invalid) throw new Error(`the stored result document ${JSON.stringify(id)} cannot be read: ${invalid}`);
    if (discarded) return { id, state: "completed", result_discarded: true };
    if (doc) return doc;
    const sched = await this.#schedule(id);
    if (!sched) return null;
    const at = parseTime((sched.header.get("Nats-Schedule") || "").replace(/^@at /, ""));
    const out = { ...placeOf(this.store.names, sched, id), state: "scheduled" };
    if (at !== null) out.next_attempt_at = rfc3339(at);
    return out;
  }

  // schedule reads the pending schedule of a delayed task, null when there is none.
  #schedule(id) {
    const n = this.store.names;
    return tries(() => this.store.jsm.direct.getMessage(n.taskStream, { last_by_subj: n.schedSubject(id) })).catch(() => null);
  }

  /** wait returns a task's document once it is completed, dead or cancelled; it throws after ms. */
  async wait(id, ms = 30000) {
    // Every write is published on the key's subject, followed from before
    // the first read; a re-read every 5s is the safety net.
    const w = watch(this.store.nc, this.store.names.resultSubject(id));
    const end = Date.now() + ms;
    try {
      for (;;) {
        const mark = w.mark();
        const doc = await this.result(id);
        if (isTerminal(doc)) return doc;
        if (Date.now() >= end) throw new Error(`task ${id} did not finish within ${ms} ms`);
        await w.wait(mark, Math.min(5000, end - Date.now()));
      }
    } finally {
      w.stop();
    }
  }

  /**
   * cancel cancels a task that has not finished: it stores the
   * cancellation, deletes a pending schedule and writes the cancelled
   * document over the revision it read. It throws TaskFinishedError when
   * the task finished first and TaskNotFoundError when it is nowhere.
   */
  async cancel(id, { by = "node-producer", reason = "" } = {}) {
    const at = rfc3339(nowNanos());
    for (let i = 0; i < 5; i++) {
      const found = await this.#locate(id);
      if (i > 0 && found.doc.state === "cancelled") return found.doc;
      if (isTerminal(found.doc)) throw new TaskFinishedError(`task ${id} is ${found.doc.state}`);
      if (i === 0) await tries((timeout) => this.store.js.publish(this.store.names.cancelSubject(id), JSON.stringify({ id, by, reason, at }), { timeout }));
      if (found.schedSeq) await tries(() => this.store.jsm.streams.deleteMessage(this.store.names.taskStream, found.schedSeq, false));
      const doc = { ...found.doc, state: "cancelled", cancelled_by: by, cancel_reason: reason, finished_at: at };
      for (const k of ["next_attempt_at", "error", "reason", "progress", "result", "result_encoding"]) delete doc[k];
      try {
        const text = encodeDoc(doc);
        await this.store.putAt(id, text, found.rev);
        await this.store.releaseUnique(found.uniqueKey, id);
        this.store.event("cancelled", doc, text);
        return doc;
      } catch (err) {
        if (!conflict(err)) throw err;
      }
    }
    throw new Error(`task ${id}: its result kept changing while cancelling; its cancellation is stored`);
  }

  // locate finds task id: its document, else its message in the task
  // stream (its schedule first), with the revision to write over.
  async #locate(id) {
    const { doc, rev, discarded, invalid } = await this.store.read(id);
    if (invalid) throw new Error(`the stored result document ${JSON.stringify(id)} cannot be read: ${invalid}`);
    if (discarded) return { doc: { id, state: "completed", result_discarded: true }, rev };
    if (doc) return { doc, rev, uniqueKey: "" };
    const sched = await this.#schedule(id);
    const m = sched ?? (await this.#find(id));
    if (!m) throw new TaskNotFoundError(`task ${id} has no result, no pending schedule and is in no place of the task stream`);
    const out = { ...placeOf(this.store.names, m, id), state: "pending" };
    const h = m.header;
    return { doc: out, rev, uniqueKey: h.get("Spool-Unique-Key"), schedSeq: sched ? m.seq : 0 };
  }

  // find walks the task stream oldest first for a message carrying id,
  // leaving out the periodic schedules.
  async #find(id) {
    const n = this.store.names;
    for (let seq = 1; ; ) {
      const m = await tries(() => this.store.jsm.direct.getMessage(n.taskStream, { seq, next_by_subj: ">" }));
      if (!m) return null;
      const mine = m.header.get("Spool-Task-Id") === id || m.header.get("Nats-Msg-Id") === id;
      if (mine && !m.subject.startsWith(`${n.prefix}.cron.`)) return m;
      seq = m.seq + 1;
    }
  }

  /**
   * deadLetters lists dead letters oldest first, of a priority and a type
   * pattern when given.
   */
  async deadLetters({ priority = "*", type = ">", limit = 100 } = {}) {
    const n = this.store.names;
    const out = [];
    for (let seq = 1; out.length < limit; ) {
      const m = await tries(() => this.store.jsm.direct.getMessage(n.dlqStream, { seq, next_by_subj: n.dlqSubject(priority, type) }));
      if (!m) break;
      out.push(letter(m));
      seq = m.seq + 1;
    }
    return out;
  }

  /**
   * replay sends dead letter seq back to its original task subject as a new
   * enqueue, records the replay in the result document unless a worker
   * wrote a newer one, then deletes the dead letter (docs/contract.md,
   * "Dead letters": Replay).
   * @returns {Promise<{id: string, subject: string, replays: number}>}
   */
  async replay(seq) {
    const n = this.store.names;
    const m = await tries(() => this.store.jsm.streams.getMessage(n.dlqStream, { seq }));
    check(m, `dead letter ${seq} not found`);
    const l = letter(m);
    const place = l.originalSubject && n.parseTaskSubject(l.originalSubject);
    check(place && l.taskId, `dead letter ${seq} has no task subject or task id to replay`);
    const { doc: prev, rev } = await this.store.read(l.taskId);
    const replays = Math.max((prev?.replays ?? 0) + 1, Number(m.header.get("Spool-Replays") || 0) + 1);
    const now = rfc3339(nowNanos());
    const h = headers();
    for (const [k, v] of m.header) {
      if (k.toLowerCase().startsWith("nats-") || DEAD_HEADERS.has(k.toLowerCase())) continue;
      for (const value of v) h.append(k, value);
    }
    h.set("Spool-Task-Id", l.taskId);
    h.set("Spool-Replays", String(replays));
    h.set("Spool-Replayed-At", now);
    await tries((timeout) => this.store.js.publish(l.originalSubject, m.data, { msgID: `replay-${seq}`, headers: h, expect: { streamName: n.taskStream }, timeout }));
    const next = { id: l.taskId, type: place.type, priority: place.priority, state: "pending", attempts: 0, enqueued_at: now, replays, replayed_at: now };
    const trace = m.header.get("traceparent");
    if (trace) next.traceparent = trace;
    try {
      await this.store.putAt(l.taskId, encodeDoc(next), rev);
    } catch (err) {
      if (!conflict(err)) throw err; // else a worker wrote a newer state first: it stands
    }
    await tries(() => this.store.jsm.streams.deleteMessage(n.dlqStream, seq, false));
    return { id: l.taskId, subject: l.originalSubject, replays };
  }

  /** deadLetter reads the latest dead letter of a priority and type, null when there is none. */
  async deadLetter(priority, type) {
    const n = this.store.names;
    const m = await tries(() => this.store.jsm.streams.getMessage(n.dlqStream, { last_by_subj: n.dlqSubject(priority, type) }));
    return m && letter(m);
  }
}

// placeOf is what a task's message tells of it before any document: id,
// type and priority from the subject it runs on, enqueued_at (and
// handed_back_at for a copy Spool published again).
function placeOf(n, m, id) {
  const h = m.header;
  const target = h.get("Nats-Schedule-Target") || h.get("Spool-Held-Target") || m.subject.replace(`${n.prefix}.parked.`, `${n.prefix}.tasks.`);
  const place = n.parseTaskSubject(target) ?? { priority: "normal", type: "unknown" };
  const stored = parseTime(m.timestamp) ?? nowNanos();
  const first = parseTime(h.get("Spool-Enqueued-At"));
  const out = { id, type: place.type, priority: place.priority, state: "", attempts: 0, enqueued_at: rfc3339(first ?? stored) };
  if (first !== null) out.handed_back_at = rfc3339(stored);
  return out;
}

// DEAD_HEADERS are the headers a dead letter adds to its task's, and the
// first enqueue time a replay drops (a replay is a new enqueue).
const DEAD_HEADERS = new Set(["spool-error", "spool-reason", "spool-attempts", "spool-failed-at", "spool-original-subject", "spool-original-seq", "spool-enqueued-at"]);

function letter(m) {
  const h = (k) => m.header.get(k);
  return {
    seq: m.seq,
    subject: m.subject,
    taskId: h("Spool-Task-Id"),
    reason: h("Spool-Reason"),
    error: h("Spool-Error"),
    attempts: Number(h("Spool-Attempts")),
    originalSubject: h("Spool-Original-Subject"),
    payload: m.data,
  };
}
