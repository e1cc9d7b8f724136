// Package limits is the wire contract of Spool's flow control: the rules
// that cap how many tasks of a type run at once and how fast they start,
// fleet-wide and per flow-control key (Spool-Key), and the lease keys that
// enforce them.
//
// A rule is a JSON document in the KV bucket <prefix>_limits under the task
// type it governs, or under a type pattern that governs every type it
// matches, each on its own (Rule, RuleKey); the type's own rule, else the
// most precise pattern, governs a type (Set). Workers watch the bucket
// (View), so a put or delete takes effect across the fleet within a second.
// Enforcement uses the KV bucket <prefix>_leases, whose keys carry a
// per-key TTL:
//
//   - a concurrency slot is a key created (KV Create: compare-and-set, so a
//     slot is never held twice) when a task starts and deleted when it ends;
//     the holder renews its TTL while the task runs, so a slot held by a
//     killed worker comes back on its own when the TTL runs out;
//   - a rate limit is one key holding the limit's theoretical arrival time
//     (GCRA, a token bucket without a refill timer), advanced with a
//     compare-and-set per start.
//
// A rule may also order the tasks of each key (Rule.Ordered): they run
// one at a time in enqueue order. Turns keeps each key's waiting tasks on
// a subject of their own (spool.held.<key>.<type>), where the stream's
// per-subject index finds the oldest with one direct get, and a turn per
// key in the leases bucket, moved by compare-and-set from the task that
// finished to the next. The producer holds a task there at enqueue, so
// the key's order is the enqueue order itself. See turns.go.
//
// docs/contract.md describes the documents and keys for clients in other
// languages.
package limits
