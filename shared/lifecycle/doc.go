// Package lifecycle is the one lifecycle shared by every long-running part
// of Spool (the worker, the DLQ router, the consumer's service and metrics
// endpoints, the HTTP broker), after river's startstop:
//
//   - Start runs the part's start-up once; later calls return the first
//     call's result, and a call after Stop returns ErrStopped. The context
//     given to Start bounds start-up only.
//   - Stop asks the part to stop gracefully and waits for it, bounded by its
//     context: when that context ends first, the part is told to stop hard
//     (abandon what is in hand) and Stop returns the context's error while
//     the part finishes in the background. Stop is idempotent, safe before
//     Start (the part then never starts) and safe to call concurrently.
//   - Started, Stopping and Stopped are channels closed once each: when
//     start-up succeeded, when Stop was first called (or the part ended by
//     itself), and when the part has ended.
//
// A part embeds a Lifecycle and passes its own functions:
//
//	func (w *Worker) Start(ctx context.Context) error { return w.life.Start(ctx, w.start) }
//	func (w *Worker) Stop(ctx context.Context) error  { return w.life.Stop(ctx, w.shutdown, w.abort) }
//
// The shutdown function runs once, on its own goroutine, and the part has
// ended when it returns: Lifecycle closes Stopped then, so the goroutine
// that closes the channel is the one that knows the part is done.
package lifecycle
