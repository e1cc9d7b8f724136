package consumer

import (
	"time"

	spool "github.com/spoolq/spool/shared"
)

const numPriorities = len(spool.Priorities)

// scheduler decides which priorities the free slots pull from.
//
// In weighted mode it runs smooth weighted round-robin (the nginx upstream
// algorithm) over the priorities that have work: every pick adds each
// candidate's effective weight to its credit, takes the candidate with the
// most credit and charges it the sum of the weights. Picks are
// deterministic and, while every candidate stays non-empty, the share of
// each priority over any window of picks is within one pick of its weight
// share. The effective weight is the configured weight times the boost of
// the age of the priority's oldest waiting task.
//
// In strict mode every free slot goes to the most urgent priority with work.
//
// A scheduler is not safe for concurrent use; the worker calls it under its
// lock.
type scheduler struct {
	weights Weights
	boost   []BoostStep
	strict  bool
	credit  [numPriorities]float64
}

func newScheduler(o config) *scheduler {
	return &scheduler{weights: o.Weights, boost: o.Boost, strict: o.Strict}
}

// boostFor returns the factor of the largest step whose age age reaches,
// or 1.
func boostFor(steps []BoostStep, age time.Duration) float64 {
	f := 1.0
	for _, s := range steps {
		if age >= s.After {
			f = s.Factor
		}
	}
	return f
}

// effective returns the weights multiplied by the boost of each priority's
// oldest waiting task (zero time: none waiting, no boost).
func (s *scheduler) effective(now time.Time, oldest [numPriorities]time.Time) [numPriorities]float64 {
	var eff [numPriorities]float64
	for p := range eff {
		eff[p] = s.weights[p]
		if !oldest[p].IsZero() {
			eff[p] *= boostFor(s.boost, now.Sub(oldest[p]))
		}
	}
	return eff
}

// allocate hands n slots to the priorities. caps[p] is how many slots p can
// use now (0: p has no known work); a priority never gets more than its cap.
// Slots no priority can use are left unallocated.
func (s *scheduler) allocate(n int, caps [numPriorities]int, eff [numPriorities]float64) [numPriorities]int {
	var alloc [numPriorities]int
	if s.strict {
		for p := range caps {
			take := min(n, caps[p])
			alloc[p] = take
			n -= take
			if n == 0 {
				break
			}
		}
		return alloc
	}
	for p := range caps {
		if caps[p] == 0 {
			s.credit[p] = 0 // no credit piles up while a priority is empty
		}
	}
	for ; n > 0; n-- {
		best, total := -1, 0.0
		for p := range caps {
			if alloc[p] >= caps[p] {
				continue
			}
			s.credit[p] += eff[p]
			total += eff[p]
			if best < 0 || s.credit[p] > s.credit[best] {
				best = p
			}
		}
		if best < 0 {
			break
		}
		s.credit[best] -= total
		alloc[best]++
	}
	return alloc
}
