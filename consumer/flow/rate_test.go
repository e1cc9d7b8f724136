package flow

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/spoolq/spool/shared/limits"
)

// boundRates are the rates whose window bound the simulations check.
var boundRates = []limits.Rate{
	{Limit: 50, Period: limits.Duration(time.Second)},
	{Limit: 200, Period: limits.Duration(time.Second)},
	{Limit: 1, Period: limits.Duration(time.Second)},
	{Limit: 7, Period: limits.Duration(time.Second)},
	{Limit: 1000, Period: limits.Duration(time.Minute)},
	{Limit: 50, Period: limits.Duration(time.Second), Burst: 5},
}

// TestGCRAWindowBound drives the rate arithmetic with a simulated clock
// and workers that wake late for their turns (up to 4 intervals, with
// idle spells): no half-open window [t, t+period) ever holds more starts than
// the limit (Limit+Burst−1 with a burst), and a worker late by less than
// the slack loses no start to it.
func TestGCRAWindowBound(t *testing.T) {
	for _, r := range boundRates {
		iv, tol := r.GCRA()
		period := time.Duration(r.Period)
		rng := rand.New(rand.NewPCG(1, uint64(r.Limit)))
		for _, maxLate := range []time.Duration{0, tol, 4 * r.Interval()} {
			now := time.Unix(1_000_000, 0)
			tat := now
			var starts []time.Time
			for len(starts) < 20*r.Limit {
				if maxLate > 0 && rng.IntN(200) == 0 {
					now = now.Add(time.Duration(rng.Int64N(int64(2 * period)))) // idle spell
				}
				next, wait := gcraStep(maxTime(tat, now), now, iv, iv+tol)
				if wait > 0 {
					now = now.Add(wait)
					if maxLate > 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(maxLate) + 1)))
					}
					continue
				}
				starts, tat = append(starts, now), next
			}
			most := mostInWindow(starts, period)
			bound := r.Limit + r.BurstOrOne() - 1
			if most > bound {
				t.Errorf("%+v, late up to %s: %d starts in a window of %s, bound %d", r, maxLate, most, period, bound)
			}
			if maxLate == 0 && r.Burst == 0 && most != r.Limit {
				t.Errorf("%+v on time: most %d in a window of %s, want the limit %d", r, most, period, r.Limit)
			}
		}
	}
}

// TestGCRASlackAbsorbsLateWakeUps: starts taken up to the slack late,
// each as soon as its worker wakes, keep the long-run rate at
// Limit·Period/(Period+slack) instead of drifting back by the lateness.
func TestGCRASlackAbsorbsLateWakeUps(t *testing.T) {
	r := limits.Rate{Limit: 50, Period: limits.Duration(time.Second)}
	iv, tol := r.GCRA()
	if tol != 25*time.Millisecond || iv != 20500*time.Microsecond {
		t.Fatalf("GCRA() = %s, %s; want 20.5ms, 25ms", iv, tol)
	}
	rng := rand.New(rand.NewPCG(2, 3))
	now := time.Unix(1_000_000, 0)
	tat, first := now, now
	n := 0
	for n < 5000 {
		next, wait := gcraStep(maxTime(tat, now), now, iv, iv+tol)
		if wait > 0 {
			now = now.Add(wait + time.Duration(rng.Int64N(int64(tol))))
			continue
		}
		tat = next
		n++
	}
	got := float64(n-1) / now.Sub(first).Seconds()
	if want := float64(r.Limit) * 0.97; got < want {
		t.Errorf("%d starts late by up to %s: %.2f/s, want at least %.2f/s", n, tol, got, want)
	}
	// Without the slack the same wake-ups would lose about half the
	// lateness per start.
}

// mostInWindow counts the most starts in any half-open window [s, s+w)
// that opens at a start (the checker's definition).
func mostInWindow(starts []time.Time, w time.Duration) int {
	s := append([]time.Time(nil), starts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	most, j := 0, 0
	for i := range s {
		for j < len(s) && s[j].Before(s[i].Add(w)) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// TestReserveAheadWindowBound drives reserve's arithmetic with a
// simulated clock: three workers write groups of starts (groupOf) up to
// reserveAhead before the first is due, sleep until the group is allowed
// and wake late by up to the tolerance, or twice it (with idle spells); a
// start is taken only when its worker wakes by its reservation's end,
// else it is lost and the worker reserves again. No half-open window [t,
// t+period) ever holds more starts than the limit (Limit+Burst−1 with a
// burst), and workers that wake late by no more than what the group
// leaves of the tolerance lose no start.
func TestReserveAheadWindowBound(t *testing.T) {
	for _, r := range boundRates {
		iv, tol := r.GCRA()
		period := time.Duration(r.Period)
		n := groupOf(iv, tol)
		spare := tol - time.Duration(n-1)*iv // how late a group may wake
		for _, maxLate := range []time.Duration{0, spare, 2 * tol} {
			rng := rand.New(rand.NewPCG(3, uint64(r.Limit)))
			now := time.Unix(1_000_000, 0)
			stored := time.Time{}
			// wake is when each worker next acts; until the ends of its
			// group's reservations (none: it has no group).
			wake := []time.Time{now, now, now}
			until := make([][]time.Time, len(wake))
			var starts []time.Time
			lost := 0
			for len(starts) < 20*r.Limit {
				w := 0
				for i := range wake {
					if wake[i].Before(wake[w]) {
						w = i
					}
				}
				now = wake[w]
				if len(until[w]) > 0 {
					for _, u := range until[w] {
						if now.After(u) {
							lost++
						} else {
							starts = append(starts, now)
						}
					}
					until[w] = nil
					if maxLate > 0 && rng.IntN(100) == 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(2 * period)))) // idle spell
					}
					wake[w] = now
					continue
				}
				tat, _, wait := reserveStep(stored, now, iv, tol, spare)
				if wait > reserveAhead {
					wake[w] = now.Add(wait - reserveAhead)
					continue
				}
				stored = tat.Add(time.Duration(n) * iv)
				for k := range n {
					until[w] = append(until[w], tat.Add(time.Duration(k)*iv))
				}
				late := time.Duration(0)
				if maxLate > 0 {
					late = time.Duration(rng.Int64N(int64(maxLate) + 1))
				}
				wake[w] = maxTime(now, tat.Add(time.Duration(n-1)*iv-tol)).Add(late)
			}
			most := mostInWindow(starts, period)
			if bound := r.Limit + r.BurstOrOne() - 1; most > bound {
				t.Errorf("%+v, late up to %s: %d starts in a window of %s, bound %d", r, maxLate, most, period, bound)
			}
			if maxLate <= spare && lost > 0 {
				t.Errorf("%+v late up to %s: %d reserved starts lost", r, maxLate, lost)
			}
			// On time, a window holds the limit but for the starts of a
			// group taken a little after the earliest they could.
			if maxLate == 0 && r.Burst == 0 && (most > r.Limit || most < r.Limit-n) {
				t.Errorf("%+v on time: most %d in a window of %s, want %d to the limit %d", r, most, period, r.Limit-n, r.Limit)
			}
		}
	}
}
