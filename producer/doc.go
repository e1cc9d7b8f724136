// Package producer puts tasks into Spool.
//
// A Client is built on a caller's *nats.Conn (which it never closes) and
// speaks the wire contract of package spool: a task is a JetStream message
// on spool.tasks.<priority>.<type> whose body is the payload and whose
// metadata travels in headers. Every publish carries Nats-Msg-Id set to the
// task id, so a retried publish of the same task is stored once and
// reported as a duplicate; a delayed task also carries Spool-Task-Id (the
// server strips Nats-Msg-Id from the message its schedule fires), an
// immediate one does not need it (readers fall back to Nats-Msg-Id).
//
//	c, err := producer.New(nc, producer.WithLogger(logger))
//	res, err := c.Enqueue(ctx, producer.NewTask("email.send", body),
//		producer.ProcessIn(10*time.Second), producer.Unique("user-42", time.Hour))
//
// Many tasks stream with EnqueueAsync: it publishes without waiting for the
// stream's acknowledgement, keeping at most the publish window
// (WithPublishWindow, default DefaultPublishWindow) in flight, and returns a
// *Pending whose Wait gives the task's outcome, as nats.go's PublishAsync
// futures do; EnqueueAsyncComplete tells when nothing awaits its
// acknowledgement. EnqueueBatch is EnqueueAsync for each task of a slice,
// then Wait for each.
//
//	for _, t := range tasks {
//		p, err := c.EnqueueAsync(ctx, t) // err: not published (invalid, unique conflict, no room)
//		...
//		pending = append(pending, p)
//	}
//	for _, p := range pending {
//		res, err := p.Wait(ctx)
//		...
//	}
//
// A task whose type no worker serves is stored all the same, with
// EnqueueResult.Warning saying so: where workers pull by type it waits
// until a worker serving its type starts, where they pull by priority it
// is dead-lettered with reason no_handler. The client reads which types
// the workers serve (admin.Client.Serving) in the background at most every
// ServedCheckEvery; a reading that fails gives no warning, and
// WithUnservedWarnings(false) turns the check off.
//
// Everything the client adds is optional for other publishers: any NATS
// client publishing to spool.tasks.<priority>.<type> enqueues a task.
//
// Delayed tasks use JetStream message scheduling: the client publishes to
// spool.sched.<id> with Nats-Schedule: @at <time> and
// Nats-Schedule-Target: spool.tasks.<priority>.<type>; the server moves the
// task to its priority subject when the time comes. Cancel removes a schedule
// that has not fired.
//
// Unique tasks claim a key in the spool_unique bucket (KV Create with a
// per-key TTL, value = task id) before publishing, and release it when the
// publish fails. Result and Wait read the spool_results bucket, which only
// consumers write.
//
// Every error a caller may act on is a sentinel in errors.go, matched with
// errors.Is; validation errors also carry the field at fault (InvalidTaskError)
// and a unique-key conflict carries the id of the task holding the key
// (UniqueConflictError). Nothing is published before a task validates, and a
// task whose publish failed is never reported as enqueued.
package producer
