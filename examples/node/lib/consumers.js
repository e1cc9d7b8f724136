// Which consumers a worker pulls from (docs/contract.md, "How workers
// pull"): the five priority consumers, or, pulling by type, one consumer
// per priority and served pattern, made from the template SPOOL_TASKS
// records.

import { PRIORITIES, parseDuration, patternsOverlap, validatePattern } from "./names.js";
import { apiCode, tries } from "./store.js";

const CONSUMER_NOT_FOUND = 10014;
const CONSUMER_EXISTS = 10148;
const NOT_UNIQUE = 10100;
const FOREVER = "9999-12-31T00:00:00Z";

/**
 * servedPatterns drops a pattern another covers and refuses two that only
 * partly overlap.
 * @param {string[]} patterns
 */
export function servedPatterns(patterns) {
  for (const p of patterns) {
    const e = validatePattern(p);
    if (e) throw new Error(e);
  }
  const covers = (a, b) => a !== b && patternsOverlap(a, b) && coversAll(a, b);
  const kept = [...new Set(patterns)].filter((p) => !patterns.some((q) => covers(q, p)));
  for (let i = 0; i < kept.length; i++) {
    for (let j = 0; j < i; j++) {
      if (patternsOverlap(kept[i], kept[j])) throw new Error(`patterns ${JSON.stringify(kept[j])} and ${JSON.stringify(kept[i])} both match some task types: serve one of them`);
    }
  }
  return kept;
}

// coversAll reports whether every type b matches also matches a.
function coversAll(a, b) {
  const x = a.split(".");
  const y = b.split(".");
  for (let i = 0; i < x.length; i++) {
    if (x[i] === ">") return i < y.length;
    if (i >= y.length || y[i] === ">" || (x[i] !== "*" && x[i] !== y[i])) return false;
  }
  return x.length === y.length;
}

/**
 * lanes returns the consumers to pull, most urgent priority first:
 * {stream, priority, name, ackWaitMs, maxDeliver} on every task partition,
 * and whether the task stream is replicated. Pulling by type it makes or
 * binds them first.
 * @param {import("./store.js").Store} store
 * @param {string[]} patterns the served type patterns
 */
export async function lanes(store, patterns, log) {
  const n = store.names;
  const info = await tries(() => store.jsm.streams.info(n.taskStream));
  const meta = info.config.metadata ?? {};
  const replicated = info.config.num_replicas > 1;
  // Every task partition has the same consumers: SPOOL_TASKS, then SPOOL_TASKS_<k>.
  const parts = Math.max(1, Number.parseInt(meta.spool_partitions, 10) || 1);
  const streams = Array.from({ length: parts }, (_, k) => (k === 0 ? n.taskStream : `${n.taskStream}_${k}`));
  const out = [];
  if (meta.spool_consumers !== "type") {
    for (const stream of streams) {
      for (const priority of PRIORITIES) {
        const ci = await tries(() => store.jsm.consumers.info(stream, n.priorityConsumer(priority)));
        out.push(lane(stream, priority, ci, "by priority"));
      }
    }
    return { mode: "priority", lanes: out, replicated };
  }
  const template = {
    ack_wait: Number(safe(() => parseDuration(meta.spool_ack_wait), 30000000000n)),
    max_deliver: safe(() => Number.parseInt(meta.spool_max_deliver, 10) || 10, 10),
    max_ack_pending: safe(() => Number.parseInt(meta.spool_max_ack_pending, 10) || 100000, 100000),
  };
  for (const stream of streams) {
    for (const pattern of servedPatterns(patterns)) {
      for (const priority of PRIORITIES) {
        out.push(lane(stream, priority, await makeOrBind(store, stream, priority, pattern, template, log), pattern));
      }
    }
  }
  return { mode: "type", lanes: out, replicated };
}

function safe(fn, fallback) {
  try {
    return fn();
  } catch {
    return fallback;
  }
}

function lane(stream, priority, ci, pattern) {
  return { stream, priority, pattern, name: ci.name, ackWaitMs: Number(ci.config.ack_wait) / 1e6, maxDeliver: ci.config.max_deliver };
}

// makeOrBind looks the consumer up, and creates it from the template when
// it is missing, joining a pause of its priority or exact type.
async function makeOrBind(store, stream, priority, pattern, template, log) {
  const n = store.names;
  const name = n.typeConsumer(priority, pattern);
  const info = () => tries(() => store.jsm.consumers.info(stream, name));
  try {
    return await info();
  } catch (err) {
    if (apiCode(err) !== CONSUMER_NOT_FOUND) throw err;
  }
  const pauseKeys = [`priority=${priority}`, ...(/[*>]/.test(pattern) ? [] : [pattern])];
  const before = await pausedUntil(store, pauseKeys);
  const config = {
    durable_name: name,
    description: `Spool workers pulling ${priority} tasks of ${pattern}`,
    filter_subject: n.taskSubject(priority, pattern),
    deliver_policy: "all",
    ack_policy: "explicit",
    ack_wait: template.ack_wait,
    max_deliver: template.max_deliver,
    max_ack_pending: template.max_ack_pending,
    max_waiting: 512,
    replay_policy: "instant",
    ...(before ? { pause_until: before } : {}),
  };
  let ci;
  try {
    ci = await tries(() => store.jsm.consumers.add(stream, config, { action: "create" }));
    log?.(`made consumer ${name} on ${stream}`);
  } catch (err) {
    if (apiCode(err) === NOT_UNIQUE) throw new Error(`pattern ${pattern} overlaps a pattern another worker serves (${err.message}): serve the same patterns as it, or types it does not serve`);
    if (apiCode(err) !== CONSUMER_EXISTS) throw err;
    return info();
  }
  const after = await pausedUntil(store, pauseKeys);
  if (after) await tries(() => store.jsm.consumers.pause(stream, name, new Date(after)));
  return ci;
}

// pausedUntil returns the latest end of the pause records among keys that
// hold now, "" when none holds.
async function pausedUntil(store, keys) {
  const kv = await store.paused();
  let until = "";
  for (const key of keys) {
    const e = await tries(() => kv.get(key));
    if (!e || e.operation !== "PUT") continue;
    let end = FOREVER;
    try {
      end = e.json().until ?? FOREVER;
    } catch {
      // a record that does not decode holds until resumed
    }
    if (Date.parse(end) > Date.now() && end > until) until = end;
  }
  return until;
}
