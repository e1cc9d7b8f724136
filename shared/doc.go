// Package spool holds Spool's wire contract: priorities, subject and stream
// naming, header names, task-id rules, the result document and the
// dead-letter reasons. Producers, consumers and any other NATS client agree on
// these names; they are documented for non-Go clients in the README.
//
// The package has no I/O. Configuration, logging and connecting live in the
// sibling packages config, logging and natsconn.
package spool
