// Package natscli drives the dev stack with the real `nats` CLI (built by
// `make tools` into bin/nats), proving that the README's inspection
// commands work against Spool's topology as documented.
package natscli
