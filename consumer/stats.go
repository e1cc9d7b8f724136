package consumer

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// numBounds is the number of finite bucket bounds of a Distribution.
const numBounds = 23

// bucketBound is the upper bound of bucket i: 50µs·2^i.
func bucketBound(i int) time.Duration { return 50 * time.Microsecond << i }

// DistributionBounds returns the upper bounds of the buckets of every
// Distribution: 50µs doubling up to about 3.5 minutes; a last bucket
// (+Inf) follows.
func DistributionBounds() []time.Duration {
	b := make([]time.Duration, numBounds)
	for i := range b {
		b[i] = bucketBound(i)
	}
	return b
}

// Distribution is a histogram of durations with the buckets of
// DistributionBounds() (Counts has one more element, for +Inf). It maps onto a
// Prometheus histogram: Counts are per bucket, not cumulative.
type Distribution struct {
	Count  uint64
	Sum    time.Duration
	Counts []uint64
}

func (d *Distribution) observe(v time.Duration) {
	if d.Counts == nil {
		d.Counts = make([]uint64, numBounds+1)
	}
	i := 0
	for i < numBounds && v > bucketBound(i) {
		i++
	}
	d.Counts[i]++
	d.Count++
	d.Sum += v
}

func (d Distribution) clone() Distribution {
	d.Counts = append([]uint64(nil), d.Counts...)
	return d
}

// Mean is Sum/Count, or 0.
func (d Distribution) Mean() time.Duration {
	if d.Count == 0 {
		return 0
	}
	return d.Sum / time.Duration(d.Count)
}

// Quantile estimates the q-quantile (0 < q <= 1) by linear interpolation
// inside the bucket that holds it; values above the last bound report the
// last bound.
func (d Distribution) Quantile(q float64) time.Duration {
	if d.Count == 0 {
		return 0
	}
	rank := q * float64(d.Count)
	var seen float64
	for i, c := range d.Counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			if i == numBounds {
				return bucketBound(i - 1)
			}
			lo := time.Duration(0)
			if i > 0 {
				lo = bucketBound(i - 1)
			}
			frac := (rank - seen) / float64(c)
			return lo + time.Duration(frac*float64(bucketBound(i)-lo))
		}
		seen += float64(c)
	}
	return bucketBound(numBounds - 1)
}

// Counters count attempts and outcomes.
type Counters struct {
	// Processed counts finished attempts, whatever their outcome.
	Processed uint64
	// Completed counts attempts whose handler succeeded.
	Completed uint64
	// Failed counts attempts that failed (error, permanent, timeout, panic,
	// no handler, bad input).
	Failed uint64
	// Retried counts failed attempts handed back for a later retry.
	Retried uint64
	// Dead counts tasks sent to the dead-letter stream.
	Dead uint64
	// Returned counts tasks handed back unfinished at shutdown.
	Returned uint64
	// Pickup is the time from enqueue to the start of the first attempt.
	Pickup Distribution
	// Run is the handler's run time.
	Run Distribution
}

func (c *Counters) add(o *Counters) {
	c.Processed += o.Processed
	c.Completed += o.Completed
	c.Failed += o.Failed
	c.Retried += o.Retried
	c.Dead += o.Dead
	c.Returned += o.Returned
	c.Pickup = mergeDist(c.Pickup, o.Pickup)
	c.Run = mergeDist(c.Run, o.Run)
}

func mergeDist(a, b Distribution) Distribution {
	if b.Count == 0 {
		return a.clone()
	}
	out := a.clone()
	if out.Counts == nil {
		out.Counts = make([]uint64, numBounds+1)
	}
	for i, c := range b.Counts {
		out.Counts[i] += c
	}
	out.Count += b.Count
	out.Sum += b.Sum
	return out
}

func (c Counters) clone() Counters {
	c.Pickup = c.Pickup.clone()
	c.Run = c.Run.clone()
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
	// MinSlots and MaxSlots bound Slots.
	MinSlots, MaxSlots int
	// ScaleUps and ScaleDowns count autoscaling steps.
	ScaleUps, ScaleDowns uint64
	// Priorities has one entry per priority, most urgent first.
	Priorities []PriorityStats
	// Types has the counters of each task type seen (at most maxTypes
	// types; the rest are counted under "other").
	Types map[string]Counters
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
			c.Pickup.observe(o.pickup)
		}
		if o.run > 0 {
			c.Run.observe(o.run)
		}
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
