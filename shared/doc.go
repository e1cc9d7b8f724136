// Package spool holds Spool's wire contract: priorities, subject and stream
// naming, header names, task-id rules, the result document and the
// dead-letter reasons. Producers, consumers and any other NATS client agree on
// these names; docs/contract.md documents them for clients in any language.
//
// The package has no I/O. Configuration, logging and connecting live in the
// sibling packages config, logging and natsconn.
package spool
