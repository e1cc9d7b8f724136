// Package dlq is the one home of Spool's dead-letter stream (SPOOL_DLQ):
// publish a dead letter (the worker and the DLQ router), list dead letters
// with filters, page after page, show one, replay one to the subject it died
// on, and purge.
//
// Publish stores a Message under spool.dlq.<priority>.<type> (SubjectFor)
// with the original headers minus JetStream's Nats-* ones, plus the
// Spool-Error, Spool-Reason, Spool-Attempts, Spool-Failed-At,
// Spool-Original-Subject and Spool-Original-Seq headers (Header) and
// Nats-Msg-Id dlq-<taskstream>-<seq> (MsgID), so the same task dead-lettered
// twice is stored once within the stream's duplicate window.
//
// Listing never loads the whole stream: it narrows by subject
// (spool.dlq.<priority>.<type>) on the server, starts at a sequence or a time,
// and reads at most one page of matches through a short-lived ephemeral
// consumer. Reason and time filters apply to what that consumer delivers.
//
// Replay publishes the task again to its Spool-Original-Subject with the
// dead-letter headers removed, a fresh Nats-Msg-Id (replay-<seq>) and the same
// Spool-Task-Id, waits for the task stream's acknowledgement, records the
// replay in the task's result document (state pending, attempts 0, replays,
// replayed_at) and only then deletes the dead letter. A crash between the
// steps leaves the dead letter in place; replaying it again within the task
// stream's duplicate window stores the task once.
package dlq
