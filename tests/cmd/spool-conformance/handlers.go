package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// The conformance handler types a worker under test serves. Their
// behaviour is in docs/conformance.md.
const (
	// TypeEcho returns its payload byte for byte.
	TypeEcho = "conformance.echo"
	// TypeFail fails with a retryable error on attempts before succeed_at,
	// then returns {"attempt":N}.
	TypeFail = "conformance.fail"
	// TypeFatal fails with a do-not-retry verdict.
	TypeFatal = "conformance.fatal"
	// TypeSlow runs for ms milliseconds, heartbeating, then returns
	// {"slept_ms":N}; it returns early with an error when its attempt is
	// cancelled or its deadline passes.
	TypeSlow = "conformance.slow"
	// TypeCrash exits the worker process without settling on attempts
	// before succeed_at, then returns {"attempt":N}.
	TypeCrash = "conformance.crash"
	// TypeSnooze snoozes for ms milliseconds the first time it runs a
	// task, then returns {"snoozed":true}. Full level.
	TypeSnooze = "conformance.snooze"

	// TypeOther is served by the kit's own Go worker in the fleet case;
	// the worker under test must not pull it.
	TypeOther = "kit.other"
	// TypeUnserved is served by no worker: its tasks must stay queued.
	TypeUnserved = "conformance.unserved"
)

// coreTypes and fullTypes are the types a worker serves at each level.
var (
	coreTypes = []string{TypeEcho, TypeFail, TypeFatal, TypeSlow, TypeCrash}
	fullTypes = []string{TypeSnooze}
)

// payload encodes a handler's JSON payload.
func payload(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of plain values are passed
	}
	return b
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(va) // re-encoding a decoded value cannot fail
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// wantAttempt checks a {"attempt":N} result.
func wantAttempt(result []byte, n int) error {
	var out struct {
		Attempt int `json:"attempt"`
	}
	if err := json.Unmarshal(result, &out); err != nil || out.Attempt != n {
		return fmt.Errorf("result %s, want {\"attempt\":%d}", result, n)
	}
	return nil
}

// kinds lists the verbs of acks for a message, a NAK with its body.
func kinds(acks []Ack) []string {
	out := make([]string, len(acks))
	for i, a := range acks {
		out[i] = fmt.Sprintf("%s@%d", a.Kind(), a.Delivered)
		if a.Kind() == "-NAK" && a.Body != "-NAK" {
			out[i] = fmt.Sprintf("%q@%d", a.Body, a.Delivered)
		}
	}
	return out
}

// hasKind reports whether an ack of kind was sent at delivery n (0: any).
func hasKind(acks []Ack, kind string, n uint64) bool {
	return slices.ContainsFunc(acks, func(a Ack) bool { return a.Kind() == kind && (n == 0 || a.Delivered == n) })
}
