// Package limits is the wire contract of Spool's flow control: the rules
// that cap how many tasks of a type run at once and how fast they start,
// fleet-wide and per flow-control key (Spool-Key), and the lease keys that
// enforce them.
//
// A rule is a JSON document in the KV bucket <prefix>_limits under the task
// type it governs (Rule). Workers watch the bucket, so a put or delete takes
// effect across the fleet within a second. Enforcement uses the KV bucket
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
// docs/contract.md describes the documents and keys for clients in other
// languages.
package limits
