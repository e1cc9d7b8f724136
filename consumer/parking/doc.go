// Package parking pauses task types for the whole fleet, for a worker.
//
// A type is paused while its key exists in the pause bucket
// (spool.Names.PausedBucket, a spool.TypePause document per type). A
// Parking keeps a live view of the bucket: the keys are listed once at
// start and again after every reconnect, and a core subscription on
// $KV.<bucket>.> follows every change, so a pause reaches every worker
// within a message's latency and no JetStream request is needed to ask.
//
// A worker that pulls a task of a paused type parks it instead of running
// it (Park): a copy goes to spool.parked.<priority>.<type> on the task
// stream, a subject no worker consumer's filter matches, with every header
// of the task, the attempts it used so far (Spool-Prior-Attempts, so the
// parking costs none) and the subject it came from
// (Spool-Original-Subject); the worker then acks the delivered message.
//
// Resuming deletes the key. Moving the parked tasks back belongs to the
// fleet, not to whoever resumed: every Parking drains the parked tasks of
// types that are not paused, at every resume it hears of and every
// DrainEvery, so a task parked after a resume by a worker whose view was
// a moment late goes back too. A drain reads the parked copies by subject
// (direct get), republishes each to its task subject with a Nats-Msg-Id
// derived from the parked copy's sequence, then deletes the copy: workers
// draining the same type at once, or one that crashed between the publish
// and the delete, store one task (within the stream's duplicate window).
// No consumer is created: the parked copies are the whole state.
package parking
