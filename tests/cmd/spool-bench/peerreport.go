package main

import (
	"fmt"
	"strings"
)

// peerOnly reports whether a row has peer figures (asynq, BullMQ) and no
// other: the main table leaves it to the peers table (a run of the peers
// scenario alone).
func (r *results) peerOnly(mode, row string) bool {
	prefix := mode + "\x00" + row + "\x00"
	peer := false
	for k, v := range r.vals {
		variant, ok := strings.CutPrefix(k, prefix)
		if !ok || len(v) == 0 {
			continue
		}
		if variant != variantAsynq && variant != variantBullMQ {
			return false
		}
		peer = true
	}
	return peer
}

// redisPersistence says how redis-server persisted in a sync mode's run.
func redisPersistence(mode string) string {
	if mode == "SyncAlways" {
		return fmt.Sprintf("`appendonly yes`, `appendfsync always` (every write fsynced before Redis replies, as SyncAlways fsyncs every JetStream write) and RDB snapshots (`save %s`)", redisSave)
	}
	return fmt.Sprintf("Redis's default persistence: RDB snapshots (`save %s`), no append-only file (a crash loses what was written since the last snapshot; JetStream's default sync flushes every 2 minutes)", redisSave)
}

// peerMethod explains the asynq rows; empty when the peers scenario did
// not run.
func peerMethod(r *results) string {
	if r.peer.redis == "" && r.peer.skipped == "" {
		return ""
	}
	if r.peer.skipped != "" {
		return fmt.Sprintf("- **peers (asynq on Redis)**: skipped: %s.\n", r.peer.skipped)
	}
	return asynqMethod(r) + bullmqMethod(r)
}

// bullmqMethod explains the BullMQ rows.
func bullmqMethod(r *results) string {
	if r.bullmq.skipped != "" {
		return fmt.Sprintf("- **peers (BullMQ on Redis)**: skipped: %s.\n", r.bullmq.skipped)
	}
	if r.bullmq.bullmq == "" {
		return ""
	}
	return fmt.Sprintf("- **peers (BullMQ on Redis)**: BullMQ %s on Node.js %s, on the same redis-server as asynq (emptied between runs), after asynq's rows. The program is `tests/cmd/spool-bench/bullmq/bench.mjs`: a `Worker` with `concurrency` = Spool's slots, a no-op processor and BullMQ's defaults otherwise (completed jobs kept, as Spool keeps its result documents). Processing fills the queue with `addBulk` (not timed) as deep as Spool's rows and times from the worker's `run()` until as many `completed` events as Spool's rows count. Pickup: a `Queue` in the same process adds one job every 1/rate s carrying the time it was added; the processor measures from it. CPU per task of the consumer is the Node process's (`process.cpuUsage`), of the server redis-server's.\n",
		r.bullmq.bullmq, r.bullmq.node)
}

// asynqMethod explains the asynq rows.
func asynqMethod(r *results) string {
	return fmt.Sprintf("- **peers (asynq on Redis)**: asynq %s on redis-server %s, which the harness starts on 127.0.0.1 (random port, temporary directory) for each run; the asynq Server runs in a consume child like Spool's worker. Same payloads as Spool's rows, the same no-op handler, asynq `Concurrency` = Spool's slots, asynq's defaults otherwise (queue `default`, 1s `TaskCheckInterval`, go-redis's pool of 10 connections per CPU); every task is enqueued with `Retention` = Spool's result TTL, so a completed task is kept in Redis as Spool keeps its result document. Enqueue: single = sequential `Client.Enqueue`; batch = %d goroutines calling `Enqueue` (asynq has no batch or asynchronous enqueue). Processing counts the handlers returned (asynq marks a task completed right after, in the same worker goroutine). Pickup: the payload carries the time the harness called `Enqueue` (Spool's rows measure from the stream timestamp, a little later); an idle asynq server polls Redis every 0.5–1.5s by default, so a second pickup row sets `TaskCheckInterval` to %s. CPU per task of the server is redis-server's, snapshot children included (/proc/<pid>/stat: utime+stime+cutime+cstime).\n",
		r.peer.asynq, r.peer.redis, asynqEnqueuers, asynqFastPoll)
}

// peerTable renders a sync mode's peer figures (asynq, BullMQ) beside
// Spool's and raw JetStream's; empty when the mode has none.
func peerTable(r *results, mode string) string {
	var rows []string
	for _, row := range r.rows[mode] {
		_, na := r.median(mode, row, variantAsynq)
		_, nb := r.median(mode, row, variantBullMQ)
		if na+nb > 0 {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Peers on Redis: asynq and BullMQ, %s\n\nasynq %s", mode, r.peer.asynq)
	if r.bullmq.bullmq != "" {
		fmt.Fprintf(&b, " and BullMQ %s (Node.js %s)", r.bullmq.bullmq, r.bullmq.node)
	}
	fmt.Fprintf(&b, " on redis-server %s with %s. Spool / peer above 1: Spool is faster (tasks/s) or costlier (µs, writes).\n\n", r.peer.redis, redisPersistence(mode))
	b.WriteString("| figure | raw JetStream | Spool | asynq (Redis) | BullMQ (Redis) | Spool / asynq | Spool / BullMQ |\n|---|---:|---:|---:|---:|---:|---:|\n")
	cell := func(v float64, n int) string {
		if n == 0 {
			return ""
		}
		return fmtVal(v)
	}
	for _, row := range rows {
		raw, nr := r.median(mode, row, "raw")
		sp, ns := r.median(mode, row, "spool")
		as, na := r.median(mode, row, variantAsynq)
		bq, nb := r.median(mode, row, variantBullMQ)
		ratio := func(peer float64, n int) string {
			if ns == 0 || n == 0 || peer == 0 {
				return ""
			}
			return fmtRatio(sp / peer)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", row, cell(raw, nr), cell(sp, ns), cell(as, na), cell(bq, nb), ratio(as, na), ratio(bq, nb))
	}
	return b.String()
}

// fmtRatio prints a ratio with two decimals, or two significant digits
// below 0.1 (Spool's pickup is thousands of times shorter than asynq's
// default polling: 0.00 would say nothing).
func fmtRatio(v float64) string {
	if v != 0 && v < 0.1 {
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.2f", v)
}
