package consumer

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/spoolq/spool/consumer/flow"
	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/fleet"
)

// Counters count attempts and outcomes.
type Counters struct {
	// Processed counts finished attempts, whatever their outcome.
	Processed uint64
	// Completed counts attempts whose handler succeeded.
	Completed uint64
	// Failed counts attempts that failed (error, permanent, timeout, panic,
	// no handler, bad input). A completed attempt whose result write met
	// an election is no failure: see WriteRetries.
	Failed uint64
	// Retried counts attempts handed back for a later retry: failed ones,
	// and completed ones whose result could not be stored in time.
	Retried uint64
	// WriteRetries counts settling writes (result, dead letter) sent again
	// after a try the cluster did not answer (a leader election); a write
	// stored on a later try counts here and nowhere else.
	WriteRetries uint64
	// AckedStored counts redelivered tasks settled without running because
	// their completed or dead result was stored already (an ack lost in a
	// leader change, a worker killed between the write and the ack): a
	// completed one acked, a dead one terminated.
	AckedStored uint64
	// Dead counts tasks sent to the dead-letter stream.
	Dead uint64
	// Returned counts tasks handed back unfinished at shutdown.
	Returned uint64
	// Pickup is the time from enqueue to the start of the first attempt.
	Pickup fleet.Histogram
	// Run is the handler's run time.
	Run fleet.Histogram
}

func (c *Counters) add(o *Counters) {
	c.Processed += o.Processed
	c.Completed += o.Completed
	c.Failed += o.Failed
	c.Retried += o.Retried
	c.WriteRetries += o.WriteRetries
	c.AckedStored += o.AckedStored
	c.Dead += o.Dead
	c.Returned += o.Returned
	c.Pickup = c.Pickup.Clone()
	c.Pickup.Merge(o.Pickup)
	c.Run = c.Run.Clone()
	c.Run.Merge(o.Run)
}

func (c Counters) clone() Counters {
	c.Pickup = c.Pickup.Clone()
	c.Run = c.Run.Clone()
	return c
}

// PriorityStats describe one priority as this worker sees it.
type PriorityStats struct {
	Priority spool.Priority
	Counters
	// Busy is the number of this worker's slots running tasks of the
	// priority.
	Busy int
	// Backlog is the number of tasks waiting (the consumer's NumPending)
	// as last seen by a pull or a refresh.
	Backlog uint64
	// OldestWait is the age of the oldest waiting task at the last refresh;
	// zero when none waits or the priority was long-polled.
	OldestWait time.Duration
	// Boost is the factor the oldest wait earns; Weight is the configured
	// weight times Boost.
	Boost  float64
	Weight float64
}

// Stats is a snapshot of a worker. Counters are cumulative since Start.
type Stats struct {
	Worker string
	State  WorkerState
	// Slots is the current pool size, Busy the slots running a handler,
	// Idle the rest.
	Slots, Busy, Idle int
	// Queued counts tasks pulled ahead of the free slots, waiting for one.
	Queued int
	// MinSlots and MaxSlots bound Slots.
	MinSlots, MaxSlots int
	// ScaleUps and ScaleDowns count autoscaling steps.
	ScaleUps, ScaleDowns uint64
	// Priorities has one entry per priority, most urgent first.
	Priorities []PriorityStats
	// Types has the counters of each task type seen (at most maxTypes
	// types; the rest are counted under "other").
	Types map[string]Counters
	// Flow has this worker's flow-control counts for each type a rule
	// governed since Start (nil when the deployment has no flow-control
	// buckets).
	Flow map[string]flow.TypeStats
}

// Total sums the counters of every priority.
func (s Stats) Total() Counters {
	var t Counters
	for i := range s.Priorities {
		t.add(&s.Priorities[i].Counters)
	}
	return t
}

// Summary is a one-line live summary, for a log line or a terminal.
func (s Stats) Summary() string {
	t := s.Total()
	var b strings.Builder
	fmt.Fprintf(&b, "%s slots %d/%d busy (max %d) done %d failed %d retried %d dead %d pickup p50 %s p99 %s backlog",
		s.State, s.Busy, s.Slots, s.MaxSlots, t.Completed, t.Failed, t.Retried, t.Dead,
		t.Pickup.Quantile(0.5).Round(time.Microsecond), t.Pickup.Quantile(0.99).Round(time.Microsecond))
	for _, p := range s.Priorities {
		fmt.Fprintf(&b, " %s=%d", p.Priority, p.Backlog)
		if p.OldestWait > 0 {
			fmt.Fprintf(&b, "(%s)", p.OldestWait.Round(time.Second))
		}
	}
	return b.String()
}

// maxTypes caps the number of task types tracked one by one.
const maxTypes = 1000

// recorder accumulates counters per priority and per type.
type recorder struct {
	mu     sync.Mutex
	byPrio [numPriorities]Counters
	byType map[string]*Counters
}

func newRecorder() *recorder { return &recorder{byType: map[string]*Counters{}} }

// outcome is what happened to one attempt, for the counters.
type outcome struct {
	completed, failed, retried, dead, returned bool
	pickup                                     time.Duration // < 0: not a first attempt
	run                                        time.Duration
}

func (r *recorder) record(p spool.Priority, typ string, o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tc := r.byType[typ]
	if tc == nil {
		if len(r.byType) >= maxTypes {
			typ = "other"
			tc = r.byType[typ]
		}
		if tc == nil {
			tc = &Counters{}
			r.byType[typ] = tc
		}
	}
	for _, c := range []*Counters{&r.byPrio[p], tc} {
		if !o.returned {
			c.Processed++
		}
		if o.completed {
			c.Completed++
		}
		if o.failed {
			c.Failed++
		}
		if o.retried {
			c.Retried++
		}
		if o.dead {
			c.Dead++
		}
		if o.returned {
			c.Returned++
		}
		if o.pickup >= 0 {
			c.Pickup.Observe(o.pickup)
		}
		if o.run > 0 {
			c.Run.Observe(o.run)
		}
	}
}

// writeRetry counts a settling write of a task of priority p and type typ
// sent again.
func (r *recorder) writeRetry(p spool.Priority, typ string) {
	r.count(p, typ, func(c *Counters) { c.WriteRetries++ })
}

// recordAcked counts a redelivered task settled because its completed or
// dead result was stored already.
func (r *recorder) recordAcked(p spool.Priority, typ string) {
	r.count(p, typ, func(c *Counters) { c.AckedStored++ })
}

// count applies inc to the counters of priority p and of type typ (or
// "other", when typ has none because the type table is full).
func (r *recorder) count(p spool.Priority, typ string, inc func(*Counters)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	inc(&r.byPrio[p])
	if tc := r.byType[typ]; tc != nil {
		inc(tc)
	} else if tc := r.byType["other"]; tc != nil {
		inc(tc)
	}
}

func (r *recorder) snapshot() ([numPriorities]Counters, map[string]Counters) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var prio [numPriorities]Counters
	for i := range prio {
		prio[i] = r.byPrio[i].clone()
	}
	types := make(map[string]Counters, len(r.byType))
	for k, v := range maps.All(r.byType) {
		types[k] = v.clone()
	}
	return prio, types
}
