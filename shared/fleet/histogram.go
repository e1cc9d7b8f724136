package fleet

import "time"

// NumBounds is the number of finite bucket bounds of a Histogram.
const NumBounds = 23

// Bound is the upper bound of bucket i (0 <= i < NumBounds): 50µs·2^i.
func Bound(i int) time.Duration { return 50 * time.Microsecond << i }

// Bounds returns the upper bounds of the buckets of every Histogram: 50µs
// doubling up to about 3.5 minutes; a last bucket (+Inf) follows.
func Bounds() []time.Duration {
	b := make([]time.Duration, NumBounds)
	for i := range b {
		b[i] = Bound(i)
	}
	return b
}

// Histogram counts durations in the buckets of Bounds (Counts has
// NumBounds+1 elements, the last one for +Inf, or none while empty). It
// maps onto a Prometheus histogram: Counts are per bucket, not cumulative.
type Histogram struct {
	Count  uint64
	Sum    time.Duration
	Counts []uint64
}

// Observe adds one duration.
func (h *Histogram) Observe(v time.Duration) {
	if h.Counts == nil {
		h.Counts = make([]uint64, NumBounds+1)
	}
	i := 0
	for i < NumBounds && v > Bound(i) {
		i++
	}
	h.Counts[i]++
	h.Count++
	h.Sum += v
}

// Clone returns a copy that shares no memory with h.
func (h Histogram) Clone() Histogram {
	h.Counts = append([]uint64(nil), h.Counts...)
	return h
}

// Merge adds o's observations to h. Counts of another length than
// NumBounds+1 (a reader of an unknown writer) are ignored.
func (h *Histogram) Merge(o Histogram) {
	if o.Count == 0 || len(o.Counts) != NumBounds+1 {
		return
	}
	if h.Counts == nil {
		h.Counts = make([]uint64, NumBounds+1)
	}
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

// Mean is Sum/Count, or 0.
func (h Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.Count)
}

// Quantile estimates the q-quantile (0 < q <= 1) by linear interpolation
// inside the bucket that holds it; values above the last bound report the
// last bound.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	var seen float64
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			if i == NumBounds {
				return Bound(i - 1)
			}
			lo := time.Duration(0)
			if i > 0 {
				lo = Bound(i - 1)
			}
			frac := (rank - seen) / float64(c)
			return lo + time.Duration(frac*float64(Bound(i)-lo))
		}
		seen += float64(c)
	}
	return Bound(NumBounds - 1)
}
