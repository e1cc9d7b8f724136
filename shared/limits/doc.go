// Package limits is the wire contract of Spool's flow control: the rules
// that cap how many tasks of a type run at once and how fast they start,
// fleet-wide and per flow-control key (Spool-Key), and the lease keys that
// enforce them.
//
// A rule is a JSON document in the KV bucket <prefix>_limits under the task
// type it governs, or under a type pattern that governs every type it
// matches, each on its own (Rule, RuleKey); the type's own rule, else the
// most precise pattern, governs a type (Set). Workers watch the bucket
// (View), so a put or delete takes effect across the fleet within a second. Enforcement uses the KV bucket
// <prefix>_leases, whose keys carry a per-key TTL:
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
// one at a time in enqueue order. JetStream delivers a priority in stream
// order but has no per-key queue, a consumer per key does not scale to
// millions of keys, and the key is a header, so the server cannot find a
// key's first task among the task subjects. Turns therefore keeps each
// key's waiting tasks on a subject of its own (spool.held.<key>.<type>),
// where the stream's per-subject index finds the oldest with one direct
// get, and a turn per key in the leases bucket, moved by compare-and-set
// from the task that finished to the next. The producer parks the task
// there at enqueue, so the key's order is the enqueue order itself; a
// design ordering tasks by their sequence on the task subjects instead
// cannot tell, when a task finishes, whether an earlier task of its key is
// still on its way to a worker. A per-key counter taken by the producer
// (2.12 counters) would also define the order, but leaves gaps (a counter
// taken, a publish failed) that need a timeout policy; the held subject
// has no gaps: it holds exactly the tasks that wait. See order.go.
//
// docs/contract.md describes the documents and keys for clients in other
// languages.
package limits
