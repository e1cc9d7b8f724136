package main

import (
	"fmt"
	"strings"
)

// peerOnly reports whether a row has asynq figures and no other: the main
// table leaves it to the asynq table (a run of the peers scenario alone).
func (r *results) peerOnly(mode, row string) bool {
	prefix := mode + "\x00" + row + "\x00"
	peer := false
	for k, v := range r.vals {
		variant, ok := strings.CutPrefix(k, prefix)
		if !ok || len(v) == 0 {
			continue
		}
		if variant != variantAsynq {
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
	return fmt.Sprintf("- **peers (asynq on Redis)**: asynq %s on redis-server %s, which the harness starts on 127.0.0.1 (random port, temporary directory) for each run; the asynq Server runs in a consume child like Spool's worker. Same payloads as Spool's rows, the same no-op handler, asynq `Concurrency` = Spool's slots, asynq's defaults otherwise (queue `default`, 1s `TaskCheckInterval`, go-redis's pool of 10 connections per CPU); every task is enqueued with `Retention` = Spool's result TTL, so a completed task is kept in Redis as Spool keeps its result document. Enqueue: single = sequential `Client.Enqueue`; batch = %d goroutines calling `Enqueue` (asynq has no batch or asynchronous enqueue). Processing counts the handlers returned (asynq marks a task completed right after, in the same worker goroutine). Pickup: the payload carries the time the harness called `Enqueue` (Spool's rows measure from the stream timestamp, a little later); an idle asynq server polls Redis every 0.5–1.5s by default, so a second pickup row sets `TaskCheckInterval` to %s. CPU per task of the server is redis-server's, snapshot children included (/proc/<pid>/stat: utime+stime+cutime+cstime).\n",
		r.peer.asynq, r.peer.redis, asynqEnqueuers, asynqFastPoll)
}

// peerTable renders a sync mode's asynq figures beside Spool's and raw
// JetStream's; empty when the mode has none.
func peerTable(r *results, mode string) string {
	var rows []string
	for _, row := range r.rows[mode] {
		if _, n := r.median(mode, row, variantAsynq); n > 0 {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### asynq (Redis), %s\n\nasynq %s on redis-server %s with %s. Spool / asynq above 1: Spool is faster (tasks/s) or costlier (µs, writes).\n\n", mode, r.peer.asynq, r.peer.redis, redisPersistence(mode))
	b.WriteString("| figure | raw JetStream | Spool | asynq (Redis) | Spool / asynq |\n|---|---:|---:|---:|---:|\n")
	for _, row := range rows {
		raw, nr := r.median(mode, row, "raw")
		sp, ns := r.median(mode, row, "spool")
		as, _ := r.median(mode, row, variantAsynq)
		cells := [3]string{"", "", fmtVal(as)}
		if nr > 0 {
			cells[0] = fmtVal(raw)
		}
		ratio := ""
		if ns > 0 {
			cells[1] = fmtVal(sp)
			if as != 0 {
				ratio = fmtRatio(sp / as)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row, cells[0], cells[1], cells[2], ratio)
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
