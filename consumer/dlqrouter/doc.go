// Package dlqrouter moves tasks that ran out of deliveries to the
// dead-letter stream.
//
// A task that kills or stalls its worker on every attempt never gets a
// verdict from a worker: it reaches its consumer's MaxDeliver and stays in
// the task stream. The server's MAX_DELIVERIES advisory, kept by the
// advisory stream, names it; a Router pulls those advisories and, for each,
// dead-letters the task (reason max_deliver), writes its dead result
// document, releases its unique key and deletes it from the task stream.
// Every step is idempotent, so any number of routers may run beside the
// workers.
//
//	r, err := dlqrouter.New(nc, dlqrouter.WithLogger(logger))
//	if err != nil { ... }
//	if err := r.Start(ctx); err != nil { ... }
//	defer r.Stop(ctx)
//
// The router is configured with validated functional options (With…), each
// documenting its default.
package dlqrouter
