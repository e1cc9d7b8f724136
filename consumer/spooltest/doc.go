// Package spooltest runs Spool inside a program's own tests, in the spirit
// of River's rivertest: a real embedded NATS server with JetStream and
// Spool's topology provisioned, workers running the program's handlers, a
// wait until every queued task is done, and a reset between cases.
//
//	srv := spooltest.Start(t)                     // server, topology, connection; stopped by t.Cleanup
//	srv.Run(t, mux)                               // a worker with the program's handlers
//	client, _ := producer.New(srv.NC)             // enqueue as the program does
//	...
//	srv.WaitDrained(t, 10*time.Second)            // every task done (completed or dead)
//	res := srv.Result(t, id)                      // its result document
//	srv.Reset(t)                                  // empty queue, dead letters and results
//
// New and Close do the same without a testing.TB (for TestMain or an
// example). Nothing here is a mock: tasks go through JetStream exactly as in
// production, on a server whose store lives in a temporary directory.
package spooltest
