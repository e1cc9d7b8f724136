// Types of spool-client: a Spool producer and a native core-level worker
// for Node.js (index.js). The wire contract they follow is docs/contract.md.

import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";

export type Priority = "critical" | "high" | "normal" | "low" | "idle";
export const PRIORITIES: readonly Priority[];

/** The state of a task as its result document records it. */
export type State = "pending" | "processing" | "retrying" | "snoozed" | "completed" | "dead" | "cancelled";

/** The result document (docs/contract.md, "The result document"). */
export interface ResultDoc {
  id: string;
  type: string;
  priority: Priority;
  state: State;
  attempts: number;
  result?: unknown;
  result_encoding?: "text" | "base64";
  error?: string;
  reason?: string;
  next_attempt_at?: string;
  enqueued_at: string;
  handed_back_at?: string;
  started_at?: string;
  finished_at?: string;
  worker?: string;
  traceparent?: string;
  replays?: number;
  replayed_at?: string;
  cancelled_by?: string;
  cancel_reason?: string;
  snoozes?: number;
  /** Set by Producer.result and wait for a completed task whose result was discarded. */
  result_discarded?: boolean;
}

export interface EnqueueOptions {
  type: string;
  /** Any bytes, or a string sent as UTF-8. */
  payload?: Uint8Array | string;
  /** The task id; a new ULID-layout id when absent. */
  id?: string;
  priority?: Priority;
  /** Run the task this many milliseconds from now (a message schedule). */
  delay?: number;
  /** Run the task at this time (a message schedule). */
  at?: Date;
  /** Retries after the first attempt, 0 to 1000. */
  maxRetries?: number;
  /** Deadline of each attempt, a Go duration ("30s", "5m"). */
  timeout?: string;
  /** The task is unique while the key lives; needs uniqueTTL. */
  uniqueKey?: string;
  /** How long the unique key lives at most, a Go duration of at least 1s. */
  uniqueTTL?: string;
  /** "discard" stores no result document when the task completes. */
  result?: "keep" | "discard";
  /** Custom headers, carried to the handler and the dead letter. */
  headers?: Record<string, string>;
}

export interface EnqueueResult {
  id: string;
  seq: number;
  duplicate: boolean;
  scheduledAt?: Date;
}

export interface DeadLetter {
  seq: number;
  subject: string;
  taskId: string;
  reason: string;
  error: string;
  attempts: number;
  originalSubject: string;
  payload: Uint8Array;
}

export class TaskFinishedError extends Error {}
export class TaskNotFoundError extends Error {}
export class UniqueConflictError extends Error {
  /** The id of the task holding the key. */
  holder: string;
}

export class Producer {
  static connect(nc: NatsConnection, opts?: { prefix?: string }): Promise<Producer>;
  enqueue(task: EnqueueOptions): Promise<EnqueueResult>;
  /** The task's document; null while it has none (queued, or scheduled). */
  result(id: string): Promise<ResultDoc | null>;
  /** The document once completed, dead or cancelled; throws after ms. */
  wait(id: string, ms?: number): Promise<ResultDoc>;
  /** Cancels a task that has not finished; returns its cancelled document. */
  cancel(id: string, opts?: { by?: string; reason?: string }): Promise<ResultDoc>;
  deadLetters(opts?: { priority?: Priority | "*"; type?: string; limit?: number }): Promise<DeadLetter[]>;
  deadLetter(priority: Priority, type: string): Promise<DeadLetter | null>;
  /** replay sends dead letter seq back to its task subject as a new enqueue and deletes it. */
  replay(seq: number): Promise<{ id: string; subject: string; replays: number }>;
}

/** One attempt of a task, as a handler sees it. */
export interface Task {
  id: string;
  type: string;
  priority: Priority;
  payload: Uint8Array;
  headers: MsgHdrs | undefined;
  /** This attempt's number, from 1. */
  attempt: number;
  /** The last attempt's number. */
  maxAttempts: number;
  enqueuedAt: Date;
  /** Aborted when the task is cancelled or runs past its deadline. */
  signal: AbortSignal;
}

/**
 * A handler returns the output: bytes as they are, a string as UTF-8,
 * nothing for no output, any other value as JSON. A thrown error retries
 * the task (dead on the last attempt); see permanent and retryAfter.
 */
export type Handler = (task: Task) => unknown | Promise<unknown>;

export interface WorkerOptions {
  /** Handlers by exact task type or type pattern ("email.*", "reports.>"). */
  handlers: Record<string, Handler>;
  /** The type patterns served when pulling by type; default the handlers' keys. */
  types?: string[];
  /** Tasks run at once; default 4. */
  concurrency?: number;
  /** The name in result documents; default <hostname>-<pid>. */
  name?: string;
  prefix?: string;
  /** Retries when a task has no Spool-Max-Retries; default 3. */
  maxRetries?: number;
  /** Deadline when a task has no Spool-Timeout, a Go duration; default "30m". */
  timeout?: string;
  /** Backoff base and cap in milliseconds; default 1000 and 300000. */
  retryBase?: number;
  retryMax?: number;
  /** Milliseconds before the processing state is written; default 1000. */
  processingDelay?: number;
  /** Type patterns whose results are discarded unless a task says keep. */
  discard?: string[];
  /** Publish events; default true. */
  events?: boolean;
  log?: (message: string) => void;
}

export class Worker {
  constructor(nc: NatsConnection, opts: WorkerOptions);
  readonly name: string;
  /** Makes or binds the consumers and starts pulling. */
  start(): Promise<{ mode: "priority" | "type"; consumers: string[] }>;
  /** Pulls no more, waits graceMs for running tasks, hands the rest back. */
  stop(graceMs?: number): Promise<void>;
}

/** Marks an error so the task is dead-lettered at once (reason permanent). */
export function permanent<E>(err: E): E & { permanent: true };
/** Marks an error so the retry waits ms milliseconds instead of the backoff. */
export function retryAfter<E>(err: E, ms: number): E & { retryAfter: number };

/** The bytes a result document holds as its output. */
export function output(doc: ResultDoc): Uint8Array;
/** Whether a task type matches a type pattern, token by token. */
export function matchType(pattern: string, type: string): boolean;
/** A new 26-character id in the ULID layout. */
export function newID(): string;
/** The names of a deployment's subjects, streams, buckets and consumers. */
export function names(prefix?: string): Record<string, unknown>;
