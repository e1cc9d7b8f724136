package spool

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestAppendTimeMatchesRFC3339Nano(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+30*60), time.FixedZone("west", -(9*3600 + 15*60))}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		zones = append(zones, ny)
	}
	r := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{
		{}, time.Unix(0, 0), time.Date(2000, 2, 29, 23, 59, 59, 999999999, time.UTC),
		time.Date(1900, 3, 1, 0, 0, 0, 100, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Now(),
	}
	for range 20000 {
		times = append(times, time.Unix(r.Int64N(400*365*86400)-200*365*86400, r.Int64N(1e9)))
	}
	for _, tm := range times {
		for _, z := range zones {
			tz := tm.In(z)
			want := tz.Format(time.RFC3339Nano)
			if got := string(AppendTime(nil, tz)); got != want {
				t.Fatalf("%v: got %s, want %s", tz, got, want)
			}
		}
	}
}

func BenchmarkAppendTime(b *testing.B) {
	tm := time.Now()
	buf := make([]byte, 0, 64)
	b.Run("AppendTime", func(b *testing.B) {
		for b.Loop() {
			buf = AppendTime(buf[:0], tm)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for b.Loop() {
			buf = tm.AppendFormat(buf[:0], time.RFC3339Nano)
		}
	})
}
