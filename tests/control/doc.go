// Package control tests the workload controls end to end, through the Go
// producer and consumer libraries and raw NATS clients: events seen by a
// plain nats.go subscriber and by Client.Watch, progress from local and
// remote handlers, and cancelling a running task by id.
package control
