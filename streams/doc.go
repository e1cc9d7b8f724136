// Package streams is Spool's JetStream topology as code: the task stream,
// one durable pull consumer per priority, the dead-letter and advisory
// streams, the DLQ router's consumer and the results and unique-key buckets.
//
// Provision creates what is missing, updates what may change and refuses with
// ErrConflict when an existing object differs in a field JetStream cannot
// change. It is idempotent: running it twice yields identical objects.
//
// The task stream has no message or byte limits on purpose. Message
// schedules forbid DiscardNew, and DiscardOld would silently delete the
// oldest queued tasks; so the account's or server's JetStream storage bounds
// the queue, and its exhaustion refuses the publish.
package streams
