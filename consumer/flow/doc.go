// Package flow enforces Spool's flow-control rules (shared/limits) for a
// worker: fleet-wide concurrency and rate limits per task type and per
// flow-control key (Spool-Key).
//
// A Limiter watches the rules bucket and takes leases in the leases
// bucket before a task runs: Acquire returns a Lease to release when the
// handler returns, or a *DeniedError with the time to wait when a limit is
// full. Concurrency slots are KV keys created with compare-and-set and a
// TTL that the Limiter renews while the task runs, so a slot is never held
// twice and a killed worker's slots come back on their own within the TTL.
// A core subscription on the type-wide slot keys keeps a local view of
// which slots are taken, so a full limit is refused without a round trip;
// per-key slots are known from the worker's own writes and lost creates.
// The view is only a hint, the compare-and-set decides.
//
// A task whose concurrency limit is full waits in the limit's waiting
// room on the task stream (Park; shared/limits, Room), and a slot
// released while the room holds tasks is handed on to its oldest task
// instead of being freed (Lease.Release): the task is released to its
// task subject carrying the slot (GrantsOf), and AcquireGranted takes the
// slot over. Pump releases a room's tasks while its limit has free slots;
// the worker's sweep of held subjects calls it.
//
// A type-wide slot a task released while its room holds no task stays
// with the worker, unwritten, for the worker's next task of the type, and
// is freed when none takes it within a moment (keepIdle): a limit kept
// full by one worker's tasks costs no lease write per task.
//
// Where workers pull by type, the consumer of a limited type carries the
// limit as MaxAckPending, so the server lets a task through only as one
// ends. Such a task waits for its slot in its worker's line for the type
// (AcquireWaiting): a slot the worker releases goes to the first in line,
// and a slot freed elsewhere wakes it.
//
// Per-key ordering (a rule's "ordered") is not a lease: the worker and the
// producer run it through shared/limits.Turns, before the Limiter's leases.
package flow
