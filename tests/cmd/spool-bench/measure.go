package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// window measures CPU and wall time of the measured part.
type window struct {
	t0      time.Time
	cpu0    time.Duration
	writes0 int64
}

func startWindow() window {
	fmt.Println("start")
	return window{t0: time.Now(), cpu0: selfCPU(), writes0: selfWrites()}
}

// end closes the window and prints "end", so that the harness reads the
// server's CPU here rather than after the consumer's shutdown.
func (w window) end(rep *consumeReport, tasks int) {
	fmt.Println("end")
	rep.Seconds = time.Since(w.t0).Seconds()
	rep.CPUus = float64((selfCPU() - w.cpu0).Microseconds())
	rep.Writes = selfWrites() - w.writes0
	rep.Tasks = tasks
}

// selfWrites is the number of write system calls this process has made
// (syscw in /proc/self/io): a consumer writes only to its connection, so
// these are its network writes, each of which costs it and the server far
// more than a message does.
func selfWrites() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus reads VmRSS and VmHWM (KiB) of this process.
func procStatus() (rss, hwm int64) {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var v int64
		if n, _ := fmt.Sscanf(sc.Text(), "VmRSS: %d kB", &v); n == 1 {
			rss = v
		}
		if n, _ := fmt.Sscanf(sc.Text(), "VmHWM: %d kB", &v); n == 1 {
			hwm = v
		}
	}
	return rss, hwm
}

func quantiles(samples []time.Duration, rep *consumeReport) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	rep.P50us = us(samples[len(samples)/2])
	rep.P99us = us(samples[len(samples)*99/100])
	rep.MaxUs = us(samples[len(samples)-1])
}

// shares counts the first window tasks started per priority and the
// longest time the lowest priority went without a start.
func shares(order []spool.Priority, starts []time.Time, begin time.Time, window int, rep *consumeReport) {
	window = min(window, len(order))
	if window == 0 {
		return
	}
	var counts [5]int
	last := begin
	var maxGap time.Duration
	for i, p := range order[:window] {
		counts[p]++
		if p == spool.Idle {
			maxGap = max(maxGap, starts[i].Sub(last))
			last = starts[i]
		}
	}
	maxGap = max(maxGap, starts[window-1].Sub(last))
	for p, c := range counts {
		rep.Shares[p] = 100 * float64(c) / float64(window)
	}
	rep.IdleMaxWait = float64(maxGap.Microseconds()) / 1e3
}
