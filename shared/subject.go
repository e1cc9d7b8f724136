package spool

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultPrefix is the subject prefix and name stem used unless a deployment
// picks another.
const DefaultPrefix = "spool"

// MaxTypeLen is the longest task type accepted.
const MaxTypeLen = 200

// Names derives every subject, stream, consumer and bucket name from a prefix.
// The zero value is not usable; build one with NewNames.
type Names struct {
	prefix string
}

// NewNames validates prefix (one token of [A-Za-z0-9_-], at most 32
// characters) and returns the names derived from it.
func NewNames(prefix string) (Names, error) {
	if prefix == "" || len(prefix) > 32 {
		return Names{}, fmt.Errorf("%w: %q must be 1 to 32 characters", ErrInvalidPrefix, prefix)
	}
	for i := 0; i < len(prefix); i++ {
		if !isTokenChar(prefix[i]) {
			return Names{}, fmt.Errorf("%w: %q has %q (allowed: A-Z a-z 0-9 _ -)", ErrInvalidPrefix, prefix, prefix[i])
		}
	}
	return Names{prefix: prefix}, nil
}

// DefaultNames returns the names for DefaultPrefix.
func DefaultNames() Names { return Names{prefix: DefaultPrefix} }

// Prefix returns the subject prefix.
func (n Names) Prefix() string { return n.prefix }

func (n Names) upper() string { return strings.ToUpper(n.prefix) }

// TaskStream is the WorkQueue stream holding queued tasks: SPOOL_TASKS.
func (n Names) TaskStream() string { return n.upper() + "_TASKS" }

// PartitionStream is task partition k's stream: partition 0 is TaskStream
// (SPOOL_TASKS), partition k > 0 is SPOOL_TASKS_<k>. See
// streams.Settings.Partitions.
func (n Names) PartitionStream(k int) string {
	if k == 0 {
		return n.TaskStream()
	}
	return n.TaskStream() + "_" + strconv.Itoa(k)
}

// PartitionOf is the partition number k of stream name stream, the
// inverse of PartitionStream: 0 for TaskStream, k for SPOOL_TASKS_<k>.
// ok is false for any other name.
func (n Names) PartitionOf(stream string) (k int, ok bool) {
	if stream == n.TaskStream() {
		return 0, true
	}
	rest, found := strings.CutPrefix(stream, n.TaskStream()+"_")
	if !found || rest == "" || rest[0] == '0' || len(rest) > 9 {
		return 0, false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return 0, false
		}
	}
	k, err := strconv.Atoi(rest)
	if err != nil {
		return 0, false
	}
	return k, true
}

// PartitionFilter is the subject tree task partition k's stream listens
// on: spool.part.<k>.tasks.>. The server's subject mapping
// (PartitionMapping) moves every task publish there; the stream's subject
// transform stores it back under spool.tasks.<priority>.<type>.
func (n Names) PartitionFilter(k int) string {
	return n.prefix + ".part." + strconv.Itoa(k) + ".tasks.>"
}

// PartitionMapping is the server's subject mapping that spreads task
// publishes over k partitions by a hash of the whole subject (priority and
// type): spool.tasks.> → spool.part.{{partition(k)}}.tasks.>.
func (n Names) PartitionMapping(k int) (source, destination string) {
	return n.prefix + ".tasks.>", n.prefix + ".part.{{partition(" + strconv.Itoa(k) + ")}}.tasks.>"
}

// DLQStream is the dead-letter stream: SPOOL_DLQ.
func (n Names) DLQStream() string { return n.upper() + "_DLQ" }

// AdvisoryStream captures MAX_DELIVERIES advisories: SPOOL_ADVISORIES.
func (n Names) AdvisoryStream() string { return n.upper() + "_ADVISORIES" }

// ResultsBucket is the KV bucket of result documents: spool_results.
func (n Names) ResultsBucket() string { return n.prefix + "_results" }

// ResultSubject is the subject of task id's result document in the
// results bucket ($KV.<bucket>.<id>): every write of the document is
// published there, so a core NATS subscription sees it without a
// JetStream consumer. id is not validated.
func (n Names) ResultSubject(id string) string { return "$KV." + n.ResultsBucket() + "." + id }

// UniqueBucket is the KV bucket of unique-task keys: spool_unique.
func (n Names) UniqueBucket() string { return n.prefix + "_unique" }

// CancelBucket is the KV bucket of cancellations: spool_cancel. Key = task
// id, value = a Cancellation document.
func (n Names) CancelBucket() string { return n.prefix + "_cancel" }

// CancelSubject is the subject a cancellation of task id is published on
// (the KV put of its key): $KV.spool_cancel.<id>. Workers and remote
// handlers subscribe to it, or to CancelFilter for every task.
func (n Names) CancelSubject(id string) string { return "$KV." + n.CancelBucket() + "." + id }

// CancelFilter matches every cancellation: $KV.spool_cancel.>.
func (n Names) CancelFilter() string { return "$KV." + n.CancelBucket() + ".>" }

// ProgressSubject is where a remote handler reports the progress of task
// id: <prefix>.progress.<id> (the request's Spool-Progress-Subject).
func (n Names) ProgressSubject(id string) string { return n.prefix + ".progress." + id }

// WorkflowsBucket is the KV bucket of workflow state: spool_workflows.
func (n Names) WorkflowsBucket() string { return n.prefix + "_workflows" }

// LimitsBucket is the KV bucket of flow-control rules, key = task type:
// spool_limits (see shared/limits).
func (n Names) LimitsBucket() string { return n.prefix + "_limits" }

// LeasesBucket is the KV bucket of flow-control leases (concurrency slots
// and rate-limit state), each key with a TTL: spool_leases.
func (n Names) LeasesBucket() string { return n.prefix + "_leases" }

// Consumer is the durable pull consumer of one priority: spool-high.
func (n Names) Consumer(p Priority) string { return n.prefix + "-" + p.String() }

// RouterConsumer is the durable consumer of the DLQ router on the advisory
// stream: spool-dlq-router.
func (n Names) RouterConsumer() string { return n.prefix + "-dlq-router" }

// PriorityFilter is the subject filter of one priority: spool.tasks.high.>.
func (n Names) PriorityFilter(p Priority) string {
	return n.prefix + ".tasks." + p.String() + ".>"
}

// SchedFilter matches every schedule subject: spool.sched.>.
func (n Names) SchedFilter() string { return n.prefix + ".sched.>" }

// DLQFilter matches every dead-letter subject: spool.dlq.>.
func (n Names) DLQFilter() string { return n.prefix + ".dlq.>" }

// AdvisoryFilter matches the MAX_DELIVERIES advisories of the task stream's
// consumers.
func (n Names) AdvisoryFilter() string { return n.PartitionAdvisoryFilter(0) }

// PartitionAdvisoryFilter matches the MAX_DELIVERIES advisories of task
// partition k's consumers.
func (n Names) PartitionAdvisoryFilter(k int) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + n.PartitionStream(k) + ".*"
}

// TaskSubject returns spool.tasks.<priority>.<type> after validating both.
func (n Names) TaskSubject(p Priority, typ string) (string, error) {
	if !p.Valid() {
		return "", fmt.Errorf("%w: %d", ErrInvalidPriority, int(p))
	}
	if err := ValidateType(typ); err != nil {
		return "", err
	}
	return n.prefix + ".tasks." + p.String() + "." + typ, nil
}

// ParseTaskSubject splits spool.tasks.<priority>.<type>.
func (n Names) ParseTaskSubject(subject string) (Priority, string, error) {
	return n.parsePriType(subject, ".tasks.")
}

// DLQSubject returns spool.dlq.<priority>.<type>.
func (n Names) DLQSubject(p Priority, typ string) (string, error) {
	if !p.Valid() {
		return "", fmt.Errorf("%w: %d", ErrInvalidPriority, int(p))
	}
	if err := ValidateType(typ); err != nil {
		return "", err
	}
	return n.prefix + ".dlq." + p.String() + "." + typ, nil
}

// ParseDLQSubject splits spool.dlq.<priority>.<type>.
func (n Names) ParseDLQSubject(subject string) (Priority, string, error) {
	return n.parsePriType(subject, ".dlq.")
}

func (n Names) parsePriType(subject, kind string) (Priority, string, error) {
	// Cut in two steps: joining prefix and kind would allocate for every
	// task a worker receives.
	rest, ok := strings.CutPrefix(subject, n.prefix)
	if ok {
		rest, ok = strings.CutPrefix(rest, kind)
	}
	if !ok {
		return 0, "", fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.prefix+kind)
	}
	pri, typ, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", fmt.Errorf("%w: %q has no type after the priority", ErrInvalidSubject, subject)
	}
	p, err := ParsePriority(pri)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	if err := ValidateType(typ); err != nil {
		return 0, "", fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	return p, typ, nil
}

// SchedSubject returns spool.sched.<id>, the subject holding a task's
// schedule until it fires.
func (n Names) SchedSubject(id string) (string, error) {
	if err := ValidateID(id); err != nil {
		return "", err
	}
	return n.prefix + ".sched." + id, nil
}

// HeldSubject returns spool.held.<keytoken>.<type>: where the tasks of an
// ordered type wait for their key's turn, in enqueue order, outside every
// worker consumer's filter. keyToken is the flow-control key as its
// unpadded base64url (limits.EncodeKey); typ is not validated.
func (n Names) HeldSubject(keyToken, typ string) string {
	return n.prefix + ".held." + keyToken + "." + typ
}

// HeldFilter matches every held subject: spool.held.>.
func (n Names) HeldFilter() string { return n.prefix + ".held.>" }

// ParseHeldSubject returns the key token and the type of
// spool.held.<keytoken>.<type>.
func (n Names) ParseHeldSubject(subject string) (keyToken, typ string, err error) {
	return n.parseKeyed(subject, ".held.", "held subject")
}

// KickSubject returns spool.kick.<keytoken>.<type>: a core NATS request
// to the fleet (one worker of the queue group "spool-kick" takes it) to
// release the key's held tasks while its window has room. A producer that
// parked a task sends it, so producers need no right to read or delete
// held tasks.
func (n Names) KickSubject(keyToken, typ string) string {
	return n.prefix + ".kick." + keyToken + "." + typ
}

// KickFilter matches every kick request: spool.kick.>.
func (n Names) KickFilter() string { return n.prefix + ".kick.>" }

// ParseKickSubject returns the key token and the type of
// spool.kick.<keytoken>.<type>.
func (n Names) ParseKickSubject(subject string) (keyToken, typ string, err error) {
	return n.parseKeyed(subject, ".kick.", "kick subject")
}

// parseKeyed splits <prefix><infix><keytoken>.<type>.
func (n Names) parseKeyed(subject, infix, what string) (keyToken, typ string, err error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+infix)
	keyToken, typ, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || keyToken == "" || typ == "" {
		return "", "", fmt.Errorf("%q is not a %s %s%s<keytoken>.<type>", subject, what, n.prefix, infix)
	}
	return keyToken, typ, nil
}

// CronSubject returns spool.cron.<name>, the subject holding the periodic
// schedule name (a name follows the task-id rules).
func (n Names) CronSubject(name string) (string, error) {
	if err := ValidateID(name); err != nil {
		return "", fmt.Errorf("schedule name: %w", err)
	}
	return n.prefix + ".cron." + name, nil
}

// CronFilter matches every periodic schedule: spool.cron.>.
func (n Names) CronFilter() string { return n.prefix + ".cron.>" }

// ParseSchedSubject returns the task id of spool.sched.<id>.
func (n Names) ParseSchedSubject(subject string) (string, error) {
	head := n.prefix + ".sched."
	id, ok := strings.CutPrefix(subject, head)
	if !ok {
		return "", fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, head)
	}
	if err := ValidateID(id); err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrInvalidSubject, subject, err)
	}
	return id, nil
}

// ValidateType checks a task type: one or more dot-separated tokens of
// [A-Za-z0-9_-], at most MaxTypeLen characters ("email.send").
func ValidateType(typ string) error {
	if typ == "" {
		return fmt.Errorf("%w: empty", ErrInvalidType)
	}
	if len(typ) > MaxTypeLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidType, len(typ), MaxTypeLen)
	}
	start := 0
	for i := 0; i <= len(typ); i++ {
		if i == len(typ) || typ[i] == '.' {
			if i == start {
				return fmt.Errorf("%w: %q has an empty token at %d", ErrInvalidType, typ, i)
			}
			start = i + 1
			continue
		}
		if !isTokenChar(typ[i]) {
			return fmt.Errorf("%w: %q has %q at %d (allowed: A-Z a-z 0-9 _ - and . between tokens)", ErrInvalidType, typ, typ[i], i)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ValidateTypePattern checks a task-type pattern: a task type whose tokens
// may be "*" (any one token) and whose last token may be ">" (one or more
// tokens), as NATS subject wildcards: "email.send", "email.*", "email.>",
// ">".
func ValidateTypePattern(pattern string) error {
	if pattern == "" {
		return fmt.Errorf("%w: empty pattern", ErrInvalidType)
	}
	toks := strings.Split(pattern, ".")
	for i, tok := range toks {
		if tok == "*" || tok == ">" && i == len(toks)-1 {
			continue
		}
		if err := ValidateType(tok); err != nil {
			return fmt.Errorf("pattern %q: token %q is not a type token, * or a final >: %w", pattern, tok, err)
		}
	}
	return nil
}

// MatchType reports whether typ matches a pattern that
// ValidateTypePattern accepts, token by token.
func MatchType(pattern, typ string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		if pt == ">" {
			return typ != ""
		}
		tt, trest, tmore := strings.Cut(typ, ".")
		if tt == "" || pt != "*" && pt != tt {
			return false
		}
		if !pmore || !tmore {
			return pmore == tmore
		}
		pattern, typ = prest, trest
	}
}
