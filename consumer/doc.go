// Package consumer is Spool's worker library: a mux of handlers by task
// type, a scheduler that pulls from one durable consumer per priority (of
// every task partition) by weight (with an anti-starvation boost, or strictly), retries with
// NAK-with-delay backoff, dead letters, results in KV, autoscaled worker
// slots and stats.
//
// The root package holds the Worker, the Mux, the Handler, Middleware and
// Task types, the permanent-error wrapper and the worker's options. Each
// other concern has a package of its own:
//
//   - consumer/dlqrouter: the DLQ router, which dead-letters tasks that ran
//     out of deliveries (their worker crashed or stalled every time);
//   - consumer/remote: handlers served over NATS request-reply, in any
//     language;
//   - consumer/service: the spool-consumer NATS micro service that
//     publishes a worker's stats;
//   - consumer/metrics: the Prometheus collector over Worker.Stats;
//   - consumer/tracing: the OpenTelemetry middleware;
//   - shared/telemetry: OpenTelemetry SDK set-up for a binary;
//   - consumer/demo: the demo handlers of spool-consumer --demo;
//   - streams/dlq: the dead-letter stream (publish, list, replay, purge).
//
// The worker is configured with validated functional options (With…), each
// documenting its default; New fails with an error wrapping
// ErrInvalidOption when one does not hold.
//
// # Running a worker
//
//	mux := consumer.NewMux()
//	mux.HandleFunc("email.send", sendEmail)
//	w, err := consumer.New(nc, mux, consumer.WithConcurrency(1, 10), consumer.WithLogger(logger))
//	...
//	err = w.Start(ctx)
//	...
//	err = w.Stop(ctx) // graceful: finish or hand back running tasks
//
// # Pulling
//
// A worker never uses Consume (it pre-buffers up to 500 messages whose
// AckWait is already running, whatever the handlers' pace). It keeps a
// count of free slots and pulls about that many tasks, with pull requests (at most one outstanding per lane: a
// priority's consumer in one task partition; one partition unless the
// topology is partitioned) answered on one subscription that lives as
// long as the worker:
//
//   - priorities known to have waiting tasks get no-wait fetches sized to
//     the free slots, split between them by the scheduler (smooth weighted
//     round-robin over weight × boost, or strict order), each priority's
//     share split round robin over its partitions' lanes. One round of
//     fetches is in flight at a time, so slots freed meanwhile are pulled
//     together in the next, larger batch;
//   - fetches pull ahead of the free slots by what the slots free during
//     one pull round trip at the pace of recent attempts (at most the
//     maximum concurrency; about none when tasks run much longer than a
//     round trip), so short tasks never leave a slot waiting for a pull.
//     A task pulled ahead waits in the worker's queue for the next slot
//     that frees (strict mode pulls none ahead: it could start before a
//     more urgent task of the same round), heartbeated with InProgress if
//     it waits a third of its AckWait; the next round goes when half the
//     queue has drained. A graceful Stop runs the queued tasks; a hard one
//     hands them back;
//   - what a worker knows comes from the NumPending of the last message
//     pulled from a priority, and from a refresh every refresh interval
//     (WithPolling) that
//     reads consumer info (NumPending, and NumAckPending for redeliveries
//     coming due, which NumPending does not count) and the oldest waiting
//     task (for the boost) of priorities not being long-polled;
//   - when slots are left over, every lane with no known work gets a
//     long-poll (the most urgent priorities' first, while slots last): a single-task pull request that waits the poll wait
//     (WithPolling) on the server and is then renewed. It reserves a slot
//     out of the maximum concurrency,
//     so a task it brings always has a slot (the pool grows if needed) and
//     nothing pulled is handed back unrun (except what arrives for a
//     request abandoned after 2s without an answer, or at Stop). A
//     published task reaches a waiting pull in about a millisecond; an
//     idle worker costs one request per lane per poll wait; and the
//     outstanding pulls let the server emit the MAX_DELIVERIES advisories
//     the DLQ router acts on. Reserved poll slots return to the pool when
//     their pulls expire.
//
// # Attempts
//
// The attempt number is the delivery count. A task gets
// min(Spool-Max-Retries+1, consumer MaxDeliver) attempts, each under its
// Spool-Timeout (or WithTaskTimeout), heartbeating InProgress every AckWait/3
// while the handler runs. A handler that outlives its deadline by more
// than a short grace has its task settled without it (the slot stays busy
// until it returns). A panic is a failed attempt with its stack logged. A
// failure NAKs with delay min(base·2^(attempt-1), max) plus up to the
// jitter fraction of it (WithRetry, WithRetryJitter); the last failure, a Permanent error, a
// type without handler and undecodable input (bad headers or id) go to the
// dead-letter stream (streams/dlq.Publish), then the dead result is written,
// the unique key released, and only then the original removed.
//
// Every state change is written to the results bucket: processing (once
// an attempt has run for the processing delay, 1s by default, see
// WithProcessingDelay) without waiting; retrying, snoozed, completed and
// dead over the revision of the document the attempt read, so that none
// replaces a cancellation, and before the task is NAKed, acked or
// terminated. Stop hands unfinished tasks back as pending.
//
// # Stats
//
// Worker.Stats returns counters per priority and per type (processed,
// completed, failed, retried, dead, returned), pickup-latency and run-time
// histograms, busy and idle slots, the backlog and the oldest wait per
// priority; Stats.Summary is a one-line rendering.
//
// # Observability
//
// The metrics package exports Worker.Stats to Prometheus when scraped.
// service.Add registers the worker as an instance of the NATS micro service
// spool-consumer, whose stats data are the shared/fleet types, so `nats
// micro ls|info|stats spool-consumer` show the fleet. tracing.Middleware
// runs each attempt in an OpenTelemetry span, a child of the task's
// traceparent; it takes a trace.TracerProvider and uses the OpenTelemetry
// API only (the telemetry package sets up an SDK provider from the OTEL_
// variables for a binary).
package consumer
