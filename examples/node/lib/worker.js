// A native Spool worker at the core level (docs/contract.md, "Working a
// task"): it pulls only the types it serves, as many tasks as it has free
// slots, runs each under its deadline with heartbeats, and settles it:
// result before ack, retries with a NAK delay, dead letters, cancels,
// stored outcomes on redelivery, unique keys released.

import os from "node:os";
import { Match } from "@nats-io/transport-node";
import { lanes as makeLanes } from "./consumers.js";
import { ackMeta, matchType, nowNanos, parseDuration, parseTime, rfc3339, validateID } from "./names.js";
import { encodeDoc, resultValue, toBytes } from "./output.js";
import { Puller } from "./puller.js";
import { Store, watch } from "./store.js";
import * as settle from "./settle.js";

/** permanent marks an error so the task is dead-lettered at once (reason permanent). */
export function permanent(err) {
  return Object.assign(err instanceof Error ? err : new Error(String(err)), { permanent: true });
}

/** retryAfter marks an error so the retry waits ms milliseconds instead of the backoff. */
export function retryAfter(err, ms) {
  return Object.assign(err instanceof Error ? err : new Error(String(err)), { retryAfter: ms });
}

const hget = (h, k) => h?.get(k, Match.IgnoreCase) ?? "";

export class Worker {
  /**
   * @param {import("@nats-io/transport-node").NatsConnection} nc
   * @param {import("../index.js").WorkerOptions} opts
   */
  constructor(nc, opts) {
    this.nc = nc;
    this.handlers = opts.handlers;
    this.types = opts.types ?? Object.keys(opts.handlers);
    this.concurrency = opts.concurrency ?? 4;
    this.name = opts.name ?? `${os.hostname()}-${process.pid}`;
    this.prefix = opts.prefix ?? "spool";
    this.maxRetries = opts.maxRetries ?? 3;
    this.timeoutNs = parseDuration(opts.timeout ?? "30m");
    this.retryBase = opts.retryBase ?? 1000;
    this.retryMax = opts.retryMax ?? 300000;
    this.processingDelay = opts.processingDelay ?? 1000;
    this.discard = opts.discard ?? [];
    this.events = opts.events ?? true;
    this.log = opts.log ?? ((msg) => console.error(msg));
    this.running = new Map(); // task id → attempt
    this.cancelled = new Map(); // task id → cancellation document
    this.active = 0;
  }

  /** start binds or makes the consumers, follows cancellations and starts pulling. */
  async start() {
    this.store = await Store.open(this.nc, this.prefix);
    const { mode, lanes, replicated } = await makeLanes(this.store, this.types, this.log);
    this.mode = mode;
    this.replicated = replicated;
    await this.#followCancels();
    this.puller = new Puller(this.nc, lanes, () => this.concurrency - this.active, (lane, m) => this.#attempt(lane, m),
      (lane) => this.store.jsm.consumers.info(lane.stream, lane.name), this.log);
    this.puller.plan();
    return { mode, consumers: [...new Set(lanes.map((l) => l.name))] };
  }

  /**
   * stop pulls no more, waits graceMs for the running tasks, then hands
   * the unfinished ones back (pending, NAK) and returns once all settled.
   */
  async stop(graceMs = 10000) {
    await this.puller?.stop();
    const end = Date.now() + graceMs;
    while (this.active > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    for (const a of this.running.values()) a.interrupt?.({ shutdown: true });
    while (this.active > 0) await new Promise((r) => setTimeout(r, 20));
    this.cancelSub?.unsubscribe();
  }

  // followCancels holds one subscription on the cancel bucket's subjects
  // and lists its keys at start and after every reconnect.
  async #followCancels() {
    const n = this.store.names;
    const head = `$KV.${n.cancelBucket}.`;
    this.cancelSub = this.nc.subscribe(`${head}>`, {
      callback: (err, m) => {
        if (err) return;
        const id = m.subject.slice(head.length);
        if (hget(m.headers, "KV-Operation")) return void this.cancelled.delete(id);
        let c = {};
        try {
          c = m.json();
        } catch {
          // a cancellation that does not decode still cancels
        }
        this.#cancel(id, c);
      },
    });
    const load = async () => {
      for await (const id of await this.store.cancels.keys()) {
        const c = await this.store.cancellation(id).catch(() => null);
        if (c) this.#cancel(id, c);
      }
    };
    await load();
    (async () => {
      for await (const s of this.nc.status()) if (s.type === "reconnect") load().catch((err) => this.log(`listing cancellations: ${err.message}`));
    })();
  }

  #cancel(id, c) {
    this.cancelled.set(id, c);
    const a = this.running.get(id);
    if (a?.ctrl) {
      a.ctrl.abort(new Error(`task ${id} cancelled`));
      setTimeout(() => a.interrupt?.({ cancelled: true }), 50);
    }
  }

  async #attempt(lane, m) {
    this.active++;
    const md = ackMeta(m.reply);
    const a = { m, lane, md, id: String(md.streamSeq), priority: lane.priority, type: "unknown", attempt: md.delivered, rev: 0, snoozes: 0, startedAt: "", handedBack: null, settled: false };
    const beatMs = lane.ackWaitMs / 3;
    const beat = () => {
      if (a.settled) return;
      this.nc.publish(m.reply, "+WPI");
      a.beat = setTimeout(beat, beatMs);
    };
    // A task that waited in the stream for a quarter of the ack wait is
    // heartbeated at once: a new consumer leader would redeliver it.
    if (Number(nowNanos() - md.timestamp) / 1e6 >= lane.ackWaitMs / 4) this.nc.publish(m.reply, "+WPI");
    a.beat = setTimeout(beat, beatMs);
    try {
      await this.#admit(a);
    } catch (err) {
      this.log(`task ${a.id}: ${err.stack ?? err}`);
      if (!a.settled) settle.nak(this, a, settle.backoff(this, a.attempt));
    } finally {
      clearTimeout(a.beat);
      if (this.running.get(a.id) === a) this.running.delete(a.id);
      this.active--;
      a.lane.running--;
      this.puller.plan();
    }
  }

  async #admit(a) {
    const { m, md } = a;
    const h = m.headers;
    const stored = md.timestamp;
    const first = parseTime(hget(h, "Spool-Enqueued-At"));
    a.enq = first ?? stored;
    a.handedBack = first === null ? null : stored;
    const place = this.store.names.parseTaskSubject(m.subject);
    if (place) Object.assign(a, place);
    const id = hget(h, "Spool-Task-Id") || hget(h, "Nats-Msg-Id");
    if (id && !validateID(id)) a.id = id;
    a.traceparent = hget(h, "traceparent");
    if (await this.#repeating(a, h)) return;
    const bad = place ? decodeProblem(h, id) : `${m.subject} is not a task subject`;
    if (bad) return settle.deadLetter(this, a, "bad_input", bad);
    a.uniqueKey = hget(h, "Spool-Unique-Key");
    const result = hget(h, "Spool-Result");
    a.discard = result === "discard" || (result !== "keep" && this.discard.some((p) => matchType(p, a.type)));
    const prior = Number(hget(h, "Spool-Prior-Attempts") || 0);
    let doc = null;
    if (md.delivered > 1) {
      ({ doc, rev: a.rev } = await this.store.read(a.id, Math.max(10000, 0.75 * a.lane.ackWaitMs)));
      // On a replicated stream a consumer leader change redelivers tasks
      // a live worker is still settling: a task stored an ack wait ago
      // whose outcome is not stored yet waits a little for it. A task
      // whose result is discarded has none to wait for.
      const held = this.replicated && Number(nowNanos() - md.timestamp) / 1e6 >= a.lane.ackWaitMs;
      if (held && !a.discard && (!doc || (settle.sameMessage(a, doc) && doc.state === "processing"))) {
        ({ doc, rev: a.rev } = await this.#awaitOutcome(a));
      }
      if (doc && settle.sameMessage(a, doc)) a.snoozes = doc.snoozes ?? 0;
      if (await settle.storedAlready(this, a, doc)) return;
    }
    const retries = hget(h, "Spool-Max-Retries") === "" ? this.maxRetries : Number(hget(h, "Spool-Max-Retries"));
    a.attempt = Math.max(1, md.delivered + prior - a.snoozes);
    a.maxAttempts = Math.min(retries + 1, Math.max(prior + a.lane.maxDeliver - a.snoozes, a.attempt));
    if (this.cancelled.has(a.id) || doc?.state === "cancelled") return settle.cancelled(this, a);
    const handler = this.handlers[a.type] ?? Object.entries(this.handlers).find(([p]) => matchType(p, a.type))?.[1];
    if (!handler) return settle.deadLetter(this, a, "no_handler", `no handler for task type ${a.type}`);
    await this.#run(a, handler, hget(h, "Spool-Timeout"));
  }

  async #run(a, handler, timeoutHeader) {
    this.running.set(a.id, a);
    a.startedAt = rfc3339(nowNanos());
    a.ctrl = new AbortController();
    const processing = settle.doc(this, a, "processing");
    if (this.events) this.store.event("started", processing);
    const write = setTimeout(() => a.settled || this.store.putUnacked(a.id, encodeDoc(processing), a.rev), this.processingDelay);
    const timeoutMs = Number((timeoutHeader ? parseDuration(timeoutHeader) : this.timeoutNs) / 1000000n);
    const task = {
      id: a.id, type: a.type, priority: a.priority, payload: a.m.data, headers: a.m.headers,
      attempt: a.attempt, maxAttempts: a.maxAttempts, enqueuedAt: new Date(Number(a.enq / 1000000n)), signal: a.ctrl.signal,
    };
    let timer;
    const r = await new Promise((resolve) => {
      a.interrupt = resolve;
      timer = setTimeout(() => {
        a.ctrl.abort(Object.assign(new Error(`task ran past its ${timeoutMs}ms deadline`), { timeout: true }));
        setTimeout(() => resolve({ timeout: true }), 50);
      }, timeoutMs);
      Promise.resolve().then(() => handler(task)).then((value) => resolve({ value }), (error) => resolve({ error }));
    });
    clearTimeout(timer);
    clearTimeout(write);
    a.interrupt = null;
    if (r.shutdown) return settle.handBack(this, a);
    if (r.cancelled || this.cancelled.has(a.id)) return settle.cancelled(this, a);
    if (r.timeout || a.ctrl.signal.reason?.timeout) return this.#failed(a, "timeout", new Error(`task ran past its ${timeoutMs}ms deadline`));
    if (r.error) return this.#failed(a, r.error.permanent ? "permanent" : "error", r.error);
    let value;
    try {
      value = resultValue(toBytes(r.value));
    } catch (err) {
      return this.#failed(a, "error", err);
    }
    return settle.complete(this, a, value);
  }

  #failed(a, reason, err) {
    if (reason === "permanent" || a.attempt >= a.maxAttempts) return settle.deadLetter(this, a, reason, err?.message ?? String(err));
    return settle.retry(this, a, err);
  }

  // awaitOutcome waits up to a quarter of the ack wait for an earlier
  // attempt's outcome of this message, and returns the document then.
  async #awaitOutcome(a) {
    const w = watch(this.nc, this.store.names.resultSubject(a.id));
    const end = Date.now() + a.lane.ackWaitMs / 4;
    try {
      for (;;) {
        const mark = w.mark();
        const read = await this.store.read(a.id);
        const done = read.doc && settle.sameMessage(a, read.doc) && read.doc.state !== "processing";
        if (done || Date.now() >= end) return read;
        await w.wait(mark, end - Date.now());
      }
    } finally {
      w.stop();
    }
  }

  // repeating refuses a task a repeating schedule on <prefix>.sched.>
  // fired: it deletes the schedule, then dead-letters the task.
  async #repeating(a, h) {
    const next = hget(h, "Nats-Schedule-Next");
    const scheduler = hget(h, "Nats-Scheduler");
    if (!next || next === "purge" || !scheduler.startsWith(`${this.prefix}.sched.`)) return false;
    const { jsm, names } = this.store;
    try {
      for (let seq = 1; ; ) {
        const s = await jsm.direct.getMessage(names.taskStream, { seq, next_by_subj: scheduler });
        if (!s) break;
        const spec = s.header.get("Nats-Schedule");
        if (spec && !spec.startsWith("@at ")) await jsm.streams.deleteMessage(names.taskStream, s.seq, false);
        seq = s.seq + 1;
      }
    } catch (err) {
      this.log(`removing the repeating schedule ${scheduler}: ${err.message}`);
    }
    await settle.deadLetter(this, a, "bad_input", `a repeating schedule on ${scheduler} fired this task: repeating schedules on ${this.prefix}.sched are refused, periodic tasks belong on ${this.prefix}.cron.<name> (operators)`);
    return true;
  }
}

// decodeProblem checks a task's headers as the contract says; "" when they decode.
function decodeProblem(h, id) {
  if (id && validateID(id)) return validateID(id);
  const retries = hget(h, "Spool-Max-Retries");
  if (retries !== "" && !(/^\d+$/.test(retries) && Number(retries) <= 1000)) return `Spool-Max-Retries ${JSON.stringify(retries)} is not a whole number from 0 to 1000`;
  const timeout = hget(h, "Spool-Timeout");
  if (timeout !== "") {
    let ns = 0n;
    try {
      ns = parseDuration(timeout);
    } catch {
      // reported below
    }
    if (ns <= 0n || ns > 86400000000000n) return `Spool-Timeout ${JSON.stringify(timeout)} is not a Go duration above 0 and at most 24h`;
  }
  const key = hget(h, "Spool-Unique-Key");
  const ttl = hget(h, "Spool-Unique-TTL");
  if (!key !== !ttl) return "Spool-Unique-Key and Spool-Unique-TTL go together";
  if (ttl) {
    let ns = 0n;
    try {
      ns = parseDuration(ttl);
    } catch {
      // reported below
    }
    if (ns < 1000000000n) return `Spool-Unique-TTL ${JSON.stringify(ttl)} is not a Go duration of at least 1s`;
  }
  const result = hget(h, "Spool-Result");
  if (result !== "" && result !== "keep" && result !== "discard") return `Spool-Result ${JSON.stringify(result)} is not keep or discard`;
  const prior = hget(h, "Spool-Prior-Attempts");
  if (prior !== "" && !/^\d+$/.test(prior)) return `Spool-Prior-Attempts ${JSON.stringify(prior)} is not a whole number`;
  return "";
}
