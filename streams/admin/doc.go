// Package admin inspects and manages a Spool deployment: the one place the
// HTTP broker, its dashboard, spool-admin and users' own code read the
// queue's status, the consumer fleet and the dashboard's overview, and list,
// show, replay and purge dead letters.
//
//	c, err := admin.New(nc, admin.WithPrefix("spool"))
//	st, err := c.Status(ctx)       // per priority: pending, in flight, oldest wait; DLQ size, results
//	fl, err := c.Fleet(ctx)        // every spool-consumer process and the fleet's totals
//	ov, err := c.Overview(ctx)     // both, as GET /v1/overview serves them
//	page, err := c.DeadLetters(ctx, dlq.Filter{Reason: spool.ReasonTimeout})
//
// The fleet is read through the NATS service API: a request on
// $SRV.STATS.spool-consumer gathers the answers of every consumer process
// for a short while (WithFleetWait), and each process's stats endpoint data
// is decoded with the schema the consumer writes it with (shared/fleet's
// WorkerStats). Fleet totals merge the workers' latency histograms, so the
// fleet's percentiles are exact to a bucket rather than averages of
// percentiles.
//
// The dead-letter operations are those of package dlq (streams/dlq) on the
// client's connection and names. The client never closes the connection it
// was given, keeps no cache (the broker caches what it serves), and is safe
// for concurrent use.
package admin
