package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// traffic is what crossed a server over a window: its messages and bytes
// in and out as its varz counts them, and its read and write system calls
// from /proc/self/io. Reads are nearly all network reads, one per burst a
// client sends; writes include the store's.
type traffic struct {
	InMsgs   int64 `json:"in_msgs"`
	OutMsgs  int64 `json:"out_msgs"`
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
	Reads    int64 `json:"reads"`
	Writes   int64 `json:"writes"`
}

// readTraffic reads the counters of the server in this process.
func readTraffic(srv *server.Server) traffic {
	var t traffic
	if v, err := srv.Varz(nil); err == nil {
		t.InMsgs, t.OutMsgs, t.InBytes, t.OutBytes = v.InMsgs, v.OutMsgs, v.InBytes, v.OutBytes
	}
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return t
	}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			t.Reads = n
		case "syscw":
			t.Writes = n
		}
	}
	return t
}

// since is the traffic from t0 to t as one JSON line.
func (t traffic) since(t0 traffic) []byte {
	d := traffic{t.InMsgs - t0.InMsgs, t.OutMsgs - t0.OutMsgs, t.InBytes - t0.InBytes, t.OutBytes - t0.OutBytes, t.Reads - t0.Reads, t.Writes - t0.Writes}
	b, _ := json.Marshal(d)
	return append(b, '\n')
}
