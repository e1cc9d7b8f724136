// Package demo holds the demo handlers of spool-consumer --demo:
// demo.echo returns its payload, demo.sleep sleeps for {"ms":N}
// milliseconds, demo.fail fails its first {"fail_times":N} attempts,
// demo.progress reports progress after each of {"steps":N,"ms":M} steps.
// They exercise the worker (results, retries, dead letters, progress,
// shutdown) without writing a handler.
//
//	mux := consumer.NewMux()
//	demo.Register(mux)
package demo
