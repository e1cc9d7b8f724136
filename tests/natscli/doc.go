// Package natscli drives the dev stack with the real `nats` CLI (built by
// `make tools` into bin/nats), proving that the guides' inspection
// commands work against Spool's topology as documented, and runs the
// `nats` examples of the wire contract (type and priority pauses, cancel,
// events, progress, periodic schedules), read from the client guide
// docs/guide/clients.md that holds them, with the effect of each asserted.
package natscli
