// Package nodeexample runs the examples in other languages against a real
// server: examples/node (spool-client, a producer and a native worker
// written with the official @nats-io JavaScript packages following only
// docs/contract.md, and a remote handler service) and examples/shell (a
// handler served by `nats reply --command`). Tasks from Node are completed
// by Go handlers, tasks from Go by Node and shell handlers, and results
// read back on both sides are identical byte for byte. The native Node
// worker runs alone through the core cases (TestNodeWorkerCore), and beside
// a Go worker serving other types on one stream (TestMixedFleet).
//
// It needs node (v20 or newer) with `npm ci` run in examples/node, and the
// nats CLI built by `make tools`; it fails with the command to run when
// either is missing.
package nodeexample
