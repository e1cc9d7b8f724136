package spool_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

func TestTaskID(t *testing.T) {
	t.Parallel()
	names := spool.DefaultNames()
	tests := []struct {
		name   string
		hdr    map[string]string
		stream string
		want   string
	}{
		{"task id header", map[string]string{spool.HeaderTaskID: "a", spool.HeaderMsgID: "b"}, "SPOOL_TASKS", "a"},
		{"msg id fallback", map[string]string{spool.HeaderMsgID: "b"}, "SPOOL_TASKS", "b"},
		{"sequence fallback", nil, "SPOOL_TASKS", "42"},
		{"no stream is the main one", nil, "", "42"},
		{"invalid id falls back to the sequence", map[string]string{spool.HeaderTaskID: "not valid"}, "SPOOL_TASKS", "42"},
		{"partition sequence fallback", nil, "SPOOL_TASKS_2", "p2-42"},
		{"partition invalid id", map[string]string{spool.HeaderTaskID: "not valid"}, "SPOOL_TASKS_1", "p1-42"},
		{"partition keeps a task id", map[string]string{spool.HeaderTaskID: "a"}, "SPOOL_TASKS_3", "a"},
		{"partition keeps a msg id", map[string]string{spool.HeaderMsgID: "b"}, "SPOOL_TASKS_3", "b"},
		{"other stream is the plain sequence", nil, "SPOOL_DLQ", "42"},
	}
	for _, tc := range tests {
		h := nats.Header{}
		for k, v := range tc.hdr {
			h.Set(k, v)
		}
		got := names.TaskID(h, tc.stream, 42)
		if got != tc.want {
			t.Errorf("%s: TaskID = %q, want %q", tc.name, got, tc.want)
		}
		if err := spool.ValidateID(got); err != nil {
			t.Errorf("%s: TaskID %q is not a valid id: %v", tc.name, got, err)
		}
	}
}

func TestPartitionOf(t *testing.T) {
	t.Parallel()
	names := spool.DefaultNames()
	for k := range 12 {
		if got, ok := names.PartitionOf(names.PartitionStream(k)); !ok || got != k {
			t.Errorf("PartitionOf(PartitionStream(%d)) = %d, %v", k, got, ok)
		}
	}
	tests := []struct {
		stream string
		k      int
		ok     bool
	}{
		{"SPOOL_TASKS", 0, true},
		{"SPOOL_TASKS_1", 1, true},
		{"SPOOL_TASKS_16", 16, true},
		{"", 0, false},
		{"SPOOL_TASKS_", 0, false},
		{"SPOOL_TASKS_0", 0, false},
		{"SPOOL_TASKS_01", 0, false},
		{"SPOOL_TASKS_-1", 0, false},
		{"SPOOL_TASKS_1a", 0, false},
		{"SPOOL_TASKS_99999999999", 0, false},
		{"SPOOL_DLQ", 0, false},
		{"OTHER_TASKS_1", 0, false},
		{"spool_tasks_1", 0, false},
	}
	for _, tc := range tests {
		if k, ok := names.PartitionOf(tc.stream); k != tc.k || ok != tc.ok {
			t.Errorf("PartitionOf(%q) = %d, %v, want %d, %v", tc.stream, k, ok, tc.k, tc.ok)
		}
	}
	custom, err := spool.NewNames("jobs")
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := custom.PartitionOf("JOBS_TASKS_2"); !ok || k != 2 {
		t.Errorf("PartitionOf(JOBS_TASKS_2) = %d, %v", k, ok)
	}
	if _, ok := custom.PartitionOf("SPOOL_TASKS_2"); ok {
		t.Error("PartitionOf(SPOOL_TASKS_2) under prefix jobs is a partition")
	}
}
