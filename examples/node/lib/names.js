// Names, validation and time formats of Spool's wire contract
// (docs/contract.md, "Names and prefix" and "Tasks").

export const PRIORITIES = ["critical", "high", "normal", "low", "idle"];

const TOKEN = /^[A-Za-z0-9_-]+$/;
const ID = /^[A-Za-z0-9_=-]{1,128}$/;

/**
 * Every subject, stream and bucket name of a deployment, from its prefix.
 * @param {string} [prefix]
 */
export function names(prefix = "spool") {
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(prefix)) throw new Error(`prefix ${JSON.stringify(prefix)} is not 1 to 32 characters of A-Z a-z 0-9 _ -`);
  const up = prefix.toUpperCase();
  return {
    prefix,
    taskStream: `${up}_TASKS`,
    dlqStream: `${up}_DLQ`,
    resultsBucket: `${prefix}_results`,
    uniqueBucket: `${prefix}_unique`,
    cancelBucket: `${prefix}_cancel`,
    pausedBucket: `${prefix}_paused`,
    taskSubject: (priority, type) => `${prefix}.tasks.${priority}.${type}`,
    schedSubject: (id) => `${prefix}.sched.${id}`,
    dlqSubject: (priority, type) => `${prefix}.dlq.${priority}.${type}`,
    resultSubject: (id) => `$KV.${prefix}_results.${id}`,
    cancelSubject: (id) => `$KV.${prefix}_cancel.${id}`,
    eventSubject: (kind, priority, id, type) => `${prefix}.events.${kind}.${priority}.${id}.${type}`,
    priorityConsumer: (priority) => `${prefix}-${priority}`,
    typeConsumer: (priority, pattern) => `${prefix}-${priority}-${pattern.replaceAll(".", "~").replaceAll("*", "+").replaceAll(">", "^")}`,
    // parseTaskSubject returns the priority and type of a task subject, or
    // null when it is not one.
    parseTaskSubject(subject) {
      const head = `${prefix}.tasks.`;
      if (!subject.startsWith(head)) return null;
      const rest = subject.slice(head.length);
      const dot = rest.indexOf(".");
      if (dot < 0) return null;
      const priority = rest.slice(0, dot);
      const type = rest.slice(dot + 1);
      if (!PRIORITIES.includes(priority) || validateType(type)) return null;
      return { priority, type };
    },
  };
}

/** @returns {string} an error message, or "" when id is a valid task id */
export function validateID(id) {
  return ID.test(id) ? "" : `task id ${JSON.stringify(id)} is not 1 to 128 characters of A-Z a-z 0-9 _ = -`;
}

/** @returns {string} an error message, or "" when type is a valid task type */
export function validateType(type) {
  if (typeof type !== "string" || type.length === 0 || type.length > 200 || !type.split(".").every((t) => TOKEN.test(t))) {
    return `task type ${JSON.stringify(type)} is not dot-separated tokens of A-Z a-z 0-9 _ -, at most 200 characters`;
  }
  return "";
}

/** @returns {string} an error message, or "" when pattern is a valid type pattern */
export function validatePattern(pattern) {
  const toks = String(pattern).split(".");
  const ok = pattern.length > 0 && toks.every((t, i) => t === "*" || (t === ">" && i === toks.length - 1) || TOKEN.test(t));
  return ok ? "" : `type pattern ${JSON.stringify(pattern)} is not type tokens, * or a final >`;
}

/** matchType reports whether type matches pattern token by token, as NATS subjects do. */
export function matchType(pattern, type) {
  const p = pattern.split(".");
  const t = type.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return t.length > i;
    if (i >= t.length || (p[i] !== "*" && p[i] !== t[i])) return false;
  }
  return p.length === t.length;
}

/** patternsOverlap reports whether some task type matches both patterns. */
export function patternsOverlap(a, b) {
  const x = a.split(".");
  const y = b.split(".");
  for (let i = 0; ; i++) {
    if (x[i] === ">" || y[i] === ">") return i < x.length && i < y.length;
    if (i === x.length || i === y.length) return x.length === y.length;
    if (x[i] !== "*" && y[i] !== "*" && x[i] !== y[i]) return false;
  }
}

const UNITS = { ns: 1n, us: 1000n, "µs": 1000n, ms: 1000000n, s: 1000000000n, m: 60000000000n, h: 3600000000000n };

/**
 * parseDuration reads a Go duration ("1h30m", "2.5s") as nanoseconds; it
 * throws on anything else.
 * @param {string} s
 * @returns {bigint}
 */
export function parseDuration(s) {
  const re = /([0-9]*)(?:\.([0-9]*))?(ns|us|µs|ms|s|m|h)/y;
  if (s === "0") return 0n;
  let total = 0n;
  let i = 0;
  while (i < s.length) {
    re.lastIndex = i;
    const m = re.exec(s);
    if (!m || (m[1] === "" && !m[2])) throw new Error(`${JSON.stringify(s)} is not a Go duration (like 30s, 5m, 1h30m)`);
    const unit = UNITS[m[3]];
    const frac = m[2] || "";
    total += BigInt(m[1] || "0") * unit + (frac ? (BigInt(frac) * unit) / 10n ** BigInt(frac.length) : 0n);
    i = re.lastIndex;
  }
  if (i === 0) throw new Error(`${JSON.stringify(s)} is not a Go duration (like 30s, 5m, 1h30m)`);
  return total;
}

/** formatDuration writes milliseconds as a Go duration ("1500ms"). */
export function formatDuration(ms) {
  return `${Math.round(ms)}ms`;
}

/**
 * rfc3339 formats nanoseconds since the epoch as RFC 3339 in UTC with the
 * fraction Go's RFC3339Nano writes (trailing zeros dropped).
 * @param {bigint} ns
 */
export function rfc3339(ns) {
  const ms = ns / 1000000n;
  const frac = String(ns % 1000000000n).padStart(9, "0").replace(/0+$/, "");
  return new Date(Number(ms)).toISOString().slice(0, 19) + (frac ? `.${frac}` : "") + "Z";
}

/** nowNanos is the time now in nanoseconds since the epoch. */
export function nowNanos() {
  return BigInt(Date.now()) * 1000000n;
}

/**
 * parseTime reads an RFC 3339 time as nanoseconds since the epoch, null
 * when it does not parse.
 * @returns {bigint | null}
 */
export function parseTime(s) {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(s || "");
  if (!m) return null;
  const secs = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(secs)) return null;
  return BigInt(secs) * 1000000n + BigInt((m[2] || "").padEnd(9, "0") || "0");
}

/** base64url without padding: the unique bucket's key of a unique key. */
export function uniqueKVKey(key) {
  return Buffer.from(key, "utf8").toString("base64url");
}

/**
 * ackMeta reads a delivered task's metadata from its ack subject, in the
 * 9-token form `$JS.ACK.<stream>.<consumer>.<delivered>.<stream-seq>.<consumer-seq>.<ns>.<pending>`
 * or the longer one with domain and account hash before the stream (and a
 * token after). timestamp is the message's stream timestamp in nanoseconds.
 */
export function ackMeta(reply) {
  const t = reply.split(".");
  let i;
  if (t.length === 9) i = 2;
  else if (t.length >= 11) i = 4;
  else throw new Error(`${reply} is not a JetStream ack subject`);
  return {
    stream: t[i],
    consumer: t[i + 1],
    delivered: Number(t[i + 2]),
    streamSeq: Number(t[i + 3]),
    timestamp: BigInt(t[i + 5]),
    pending: Number(t[i + 6]),
  };
}
