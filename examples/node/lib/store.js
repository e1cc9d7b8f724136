// The buckets a producer and a worker both write: result documents read at
// the stream leader and written over a revision, unique keys released,
// events published (docs/contract.md, "Results bucket", "Unique keys",
// "Events").

import { headers } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { names as makeNames, nowNanos, rfc3339, uniqueKVKey } from "./names.js";
import { encodeDoc } from "./output.js";

export const WRONG_LAST_SEQUENCE = 10071;
// A replicated stream answers 10164 for the same while another write of the key is in flight.
const WRONG_LAST_SEQUENCE_INFLIGHT = 10164;
const TERMINAL = new Set(["completed", "dead", "cancelled"]);

/** isTerminal reports whether a document's state is final. */
export const isTerminal = (doc) => TERMINAL.has(doc?.state);

/** apiCode is the JetStream API error code of err, 0 when it has none. */
export function apiCode(err) {
  return typeof err?.code === "number" ? err.code : 0;
}

/** conflict reports the error of a conditional write that lost a race: the key changed since its revision was read. */
export function conflict(err) {
  return apiCode(err) === WRONG_LAST_SEQUENCE || apiCode(err) === WRONG_LAST_SEQUENCE_INFLIGHT;
}

// transient reports an error a request may meet during an election: no
// answer, no responder, a "not leader" or "temporarily unavailable" answer.
function transient(err) {
  const name = err?.name || "";
  if (name === "TimeoutError" || name === "NoRespondersError" || name === "RequestError") return true;
  return err?.status === 503 || /not leader|temporarily unavailable|no responders|timeout/i.test(String(err?.message));
}

/**
 * tries runs fn until it succeeds, fails for good, or ms pass: every
 * JetStream request gets a short timeout and is sent again through an
 * election.
 * @template T
 * @param {(timeout: number) => Promise<T>} fn
 * @returns {Promise<T>}
 */
export async function tries(fn, ms = 10000, perTry = 2000) {
  const end = Date.now() + ms;
  for (let pause = 50; ; pause = Math.min(pause * 2, 500)) {
    try {
      return await fn(Math.max(100, Math.min(perTry, end - Date.now())));
    } catch (err) {
      if (!transient(err) || Date.now() + pause >= end) throw err;
      await new Promise((r) => setTimeout(r, pause));
    }
  }
}

/**
 * watch follows a subject with a core subscription: changed(mark) tells
 * whether a message came since mark() was taken, and wait(ms) returns when
 * one comes or ms pass. Reading after mark() and waiting only when nothing
 * came meanwhile loses no message between a read and the wait.
 */
export function watch(nc, subject) {
  let seen = 0;
  let wake = () => {};
  const sub = nc.subscribe(subject, {
    callback: () => {
      seen++;
      wake();
    },
  });
  return {
    mark: () => seen,
    wait(mark, ms) {
      if (seen !== mark) return Promise.resolve();
      return new Promise((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, ms));
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    },
    stop: () => sub.unsubscribe(),
  };
}

/** Store holds the handles to the task stream and the buckets of one deployment. */
export class Store {
  /** @param {import("@nats-io/transport-node").NatsConnection} nc */
  static async open(nc, prefix = "spool") {
    const s = new Store();
    s.nc = nc;
    s.names = makeNames(prefix);
    s.js = jetstream(nc, { timeout: 2000 });
    s.jsm = await jetstreamManager(nc, { timeout: 2000 });
    const kvm = new Kvm(nc);
    s.results = await kvm.open(s.names.resultsBucket);
    s.unique = await kvm.open(s.names.uniqueBucket);
    s.cancels = await kvm.open(s.names.cancelBucket);
    return s;
  }

  /**
   * read returns a task's result document as the results stream's leader
   * holds it, with the key's revision (0: no message) and whether the last
   * message is the marker of a discarded result. A document that does not
   * decode reads as none, with invalid set: a worker writes over it.
   * @returns {Promise<{doc: object | null, rev: number, discarded: boolean, invalid?: string}>}
   */
  async read(id, ms = 10000) {
    const m = await tries(() => this.jsm.streams.getMessage(`KV_${this.names.resultsBucket}`, { last_by_subj: this.names.resultSubject(id) }), ms);
    if (!m) return { doc: null, rev: 0, discarded: false };
    if (m.data.length === 0) return { doc: null, rev: m.seq, discarded: m.header.get("Spool-Result") === "discarded" };
    try {
      const doc = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(m.data));
      if (doc && typeof doc === "object" && !Array.isArray(doc)) return { doc, rev: m.seq, discarded: false };
      return { doc: null, rev: m.seq, discarded: false, invalid: "not a JSON object" };
    } catch (err) {
      return { doc: null, rev: m.seq, discarded: false, invalid: err.message };
    }
  }

  /**
   * putAt stores a document (its JSON text) only if the key's revision is
   * still rev, and waits for the acknowledgement; a lost race throws with
   * apiCode WRONG_LAST_SEQUENCE. rev undefined writes unconditionally.
   * @returns {Promise<number>} the new revision
   */
  async putAt(id, text, rev, ms = 10000) {
    const expect = rev === undefined ? undefined : { lastSubjectSequence: rev };
    const ack = await tries((timeout) => this.js.publish(this.names.resultSubject(id), text, { expect, timeout }), ms);
    return ack.seq;
  }

  /** putDiscardedAt stores the marker of a discarded result over revision rev. */
  async putDiscardedAt(id, rev, ms = 10000) {
    const h = headers();
    h.set("KV-Operation", "DEL");
    h.set("Spool-Result", "discarded");
    h.set("Nats-Expected-Last-Subject-Sequence", String(rev));
    await tries((timeout) => this.nc.request(this.names.resultSubject(id), new Uint8Array(), { headers: h, timeout }).then((m) => {
      const reply = JSON.parse(new TextDecoder().decode(m.data) || "{}");
      if (reply.error) throw Object.assign(new Error(reply.error.description), { code: reply.error.err_code, status: reply.error.code });
      return reply;
    }), ms);
  }

  /**
   * putUnacked publishes a document without waiting: the advisory
   * processing state (over rev, dropped by the server when it lost a
   * race) and the retrying and pending states.
   */
  putUnacked(id, text, rev) {
    const h = headers();
    if (rev !== undefined) h.set("Nats-Expected-Last-Subject-Sequence", String(rev));
    this.nc.publish(this.names.resultSubject(id), text, { headers: h });
  }

  /** event announces a state change with a core publish of the document's JSON text. */
  event(kind, doc, docText) {
    const body = `{"event":${JSON.stringify(kind)},"at":${JSON.stringify(rfc3339(nowNanos()))},"task":${docText ?? encodeDoc(doc)}}`;
    this.nc.publish(this.names.eventSubject(kind, doc.priority, doc.id, doc.type), body);
  }

  /**
   * releaseUnique deletes a unique key if it still names task id; a key
   * gone, expired or held by another task is left alone.
   */
  async releaseUnique(key, id, ms = 10000) {
    if (!key) return;
    const k = uniqueKVKey(key);
    const e = await tries(() => this.unique.get(k), ms);
    if (!e || e.operation !== "PUT" || e.string() !== id) return;
    try {
      await tries(() => this.unique.delete(k, { previousSeq: e.revision }), ms);
    } catch (err) {
      if (!conflict(err)) throw err;
    }
  }

  /** paused opens the type-pause bucket, once. */
  async paused() {
    this.pausedKV ??= await new Kvm(this.nc).open(this.names.pausedBucket);
    return this.pausedKV;
  }

  /** cancellation reads the cancellation document of id, null when there is none. */
  async cancellation(id) {
    const e = await tries(() => this.cancels.get(id));
    return e && e.operation === "PUT" ? e.json() : null;
  }
}
