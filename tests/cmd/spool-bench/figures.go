package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// figures is what one run measured: the median of every row and variant
// per mode, and what the report's method names. The report is rendered
// from it, and it is written beside the report as JSON, so that a report
// can be rendered again with -render without running the benchmarks.
type figures struct {
	Written     time.Time    `json:"written"`
	WallSeconds float64      `json:"wall_seconds"`
	Runs        int          `json:"runs"`
	Machine     machineInfo  `json:"machine"`
	Counts      counts       `json:"counts"`
	Peers       peerVersions `json:"peers"`
	Modes       []modeFigs   `json:"modes"`
}

type machineInfo struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Go         string `json:"go"`
	NATSServer string `json:"nats_server"`
	NATSGo     string `json:"nats_go"`
}

// counts are the sizes of the run that the method states.
type counts struct {
	LatencyN    int  `json:"latency_n"`
	BatchN      int  `json:"batch_n"`
	BatchSize   int  `json:"batch_size"`
	Queued      int  `json:"queued"`
	ProcessN    int  `json:"process_n"`
	ProcessNAlw int  `json:"process_n_always"`
	PickupN     int  `json:"pickup_n"`
	PickupRate  int  `json:"pickup_rate"`
	SharesPer   int  `json:"shares_per"`
	SharesWin   int  `json:"shares_win"`
	SharesSlots int  `json:"shares_slots"`
	BacklogN    int  `json:"backlog_n"`
	BacklogReps int  `json:"backlog_reps"`
	LimitsN     int  `json:"limits_n"`
	WfChains    int  `json:"wf_chains"`
	WfGroup     int  `json:"wf_group"`
	Cluster     bool `json:"cluster"`
	// LimitsByType says the flow-control rows ran with workers pulling
	// by type; runs before it pulled by priority.
	LimitsByType bool `json:"limits_by_type"`
}

// peerVersions says which peers ran, or why not.
type peerVersions struct {
	Redis         string `json:"redis,omitempty"`
	Asynq         string `json:"asynq,omitempty"`
	AsynqSkipped  string `json:"asynq_skipped,omitempty"`
	Node          string `json:"node,omitempty"`
	BullMQ        string `json:"bullmq,omitempty"`
	BullMQSkipped string `json:"bullmq_skipped,omitempty"`
}

type modeFigs struct {
	Name string    `json:"name"`
	Rows []rowFigs `json:"rows"`
}

// rowFigs holds one row's medians by variant (raw, spool, raw-results, ...).
type rowFigs struct {
	Row    string            `json:"row"`
	Values map[string]median `json:"values"`
}

type median struct {
	Median float64 `json:"median"`
	Runs   int     `json:"runs"`
}

// snapshot takes the medians of a run's results.
func (r *results) snapshot(cfg config, wall time.Duration) *figures {
	f := &figures{
		Written:     time.Now().UTC(),
		WallSeconds: wall.Round(time.Second).Seconds(),
		Runs:        cfg.runs,
		Machine: machineInfo{
			CPU: cpuModel(), Cores: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			Go: runtime.Version(), NATSServer: server.VERSION, NATSGo: nats.Version,
		},
		Counts: counts{
			LatencyN: cfg.latencyN, BatchN: cfg.batchN, BatchSize: cfg.batchSize,
			Queued: cfg.queued, ProcessN: cfg.processN, ProcessNAlw: cfg.processNAlw,
			PickupN: cfg.pickupN, PickupRate: cfg.pickupRate,
			SharesPer: cfg.sharesPer, SharesWin: cfg.sharesWin, SharesSlots: cfg.sharesSlots,
			BacklogN: cfg.backlogN, BacklogReps: cfg.backlogReps, LimitsN: cfg.limitsN,
			WfChains: cfg.wfChains, WfGroup: cfg.wfGroup, Cluster: cfg.cluster,
			LimitsByType: true,
		},
		Peers: peerVersions{
			Redis: r.peer.redis, Asynq: r.peer.asynq, AsynqSkipped: r.peer.skipped,
			Node: r.bullmq.node, BullMQ: r.bullmq.bullmq, BullMQSkipped: r.bullmq.skipped,
		},
	}
	for _, mode := range r.modes {
		m := modeFigs{Name: mode}
		for _, row := range r.rows[mode] {
			rf := rowFigs{Row: row, Values: map[string]median{}}
			prefix := mode + "\x00" + row + "\x00"
			for k := range r.vals {
				if variant, ok := strings.CutPrefix(k, prefix); ok {
					if v, n := r.median(mode, row, variant); n > 0 {
						rf.Values[variant] = median{Median: v, Runs: n}
					}
				}
			}
			m.Rows = append(m.Rows, rf)
		}
		f.Modes = append(f.Modes, m)
	}
	return f
}

// sidecarPath is where the JSON of a report goes: beside it, .md replaced
// by .json.
func sidecarPath(report string) string {
	return strings.TrimSuffix(report, ".md") + ".json"
}

func (f *figures) write(path string) error {
	b, err := f.encode()
	if err != nil {
		return fmt.Errorf("encoding the figures: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func readFigures(path string) (*figures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the figures: %w", err)
	}
	var f figures
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decoding the figures of %s: %w", path, err)
	}
	if len(f.Modes) == 0 {
		return nil, fmt.Errorf("%s holds no figures", path)
	}
	return &f, nil
}

// encode writes the figures as JSON with one line per field and per row,
// which keeps a diff between two runs readable.
func (f *figures) encode() ([]byte, error) {
	var b bytes.Buffer
	line := func(indent, key string, v any, comma bool) error {
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.WriteString(indent)
		if key != "" {
			fmt.Fprintf(&b, "%q: ", key)
		}
		b.Write(j)
		if comma {
			b.WriteString(",")
		}
		b.WriteString("\n")
		return nil
	}
	b.WriteString("{\n")
	for _, kv := range []struct {
		key string
		v   any
	}{
		{"written", f.Written}, {"wall_seconds", f.WallSeconds}, {"runs", f.Runs},
		{"machine", f.Machine}, {"counts", f.Counts}, {"peers", f.Peers},
	} {
		if err := line("  ", kv.key, kv.v, true); err != nil {
			return nil, err
		}
	}
	b.WriteString("  \"modes\": [\n")
	for i, m := range f.Modes {
		fmt.Fprintf(&b, "    {\"name\": %q, \"rows\": [\n", m.Name)
		for j, row := range m.Rows {
			if err := line("      ", "", row, j < len(m.Rows)-1); err != nil {
				return nil, err
			}
		}
		b.WriteString("    ]}")
		if i < len(f.Modes)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes(), nil
}
