package streamstest

import "go.uber.org/goleak"

// ServerGoroutines are the goleak options for the background goroutines
// of a nats-server file store: its state flusher, a message block's flush
// loop and the shared access-time ticker. They run until the store is
// stopped, and a server shut down while it was still creating a stream or
// a clustered stream's log (a node stopped soon after it restarted) can
// leave such a store unstopped. Shutdown and WaitForShutdown return all
// the same, so waiting would not end them; they are the server's, not a
// leak of the tests, whose servers and connections still show as accept
// and read loops. Pass them to goleak.VerifyTestMain in packages that run
// clusters.
func ServerGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*msgBlock).flushLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	}
}
