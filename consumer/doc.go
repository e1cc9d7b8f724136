// Package consumer is Spool's worker library: a mux of handlers by task type,
// a scheduler that pulls from one durable consumer per priority by weight
// (with an anti-starvation boost, or strictly), retries with NAK-with-delay
// backoff, dead letters, results in KV, and a DLQ router for tasks that ran
// out of deliveries.
package consumer
