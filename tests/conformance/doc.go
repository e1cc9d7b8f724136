// Package conformance runs one suite of Spool's core behaviours against
// every supported server setup: a single server with file storage, a single
// server with memory storage, and a 3-node cluster with three replicas.
//
// The behaviours are written once, against the public Go APIs (producer,
// consumer, streams), and each setup only says how to start its server(s)
// and which topology settings to provision, as watermill's pubsub/tests run
// every backend through one suite. Each behaviour provisions its own
// topology under its own prefix, so behaviours of one setup run in parallel
// on one server without seeing each other's tasks.
package conformance
