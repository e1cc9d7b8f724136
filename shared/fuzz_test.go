package spool_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
)

// FuzzParseTaskSubject checks that parsing never panics and that whatever
// parses builds back to the same subject.
func FuzzParseTaskSubject(f *testing.F) {
	for _, s := range []string{"spool.tasks.high.x", "spool.tasks.idle.a.b", "spool.tasks.bogus.x", "spool.tasks.", "spool.tasks.low..x", "spool.sched.x", "", "spool.tasks.critical.é"} {
		f.Add(s)
	}
	n := spool.DefaultNames()
	f.Fuzz(func(t *testing.T, subject string) {
		p, typ, err := n.ParseTaskSubject(subject)
		if err != nil {
			return
		}
		back, err := n.TaskSubject(p, typ)
		if err != nil {
			t.Fatalf("parsed %q to (%v, %q) that does not build: %v", subject, p, typ, err)
		}
		if back != subject {
			t.Fatalf("round trip %q → %q", subject, back)
		}
	})
}

// FuzzValidateID checks that every accepted id is a single subject token and
// a valid KV key, and that the schedule subject round-trips.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"abc", "a.b", "", "01J9ZQ0000", "x=y", "a b", "*", ">"} {
		f.Add(s)
	}
	n := spool.DefaultNames()
	f.Fuzz(func(t *testing.T, id string) {
		if spool.ValidateID(id) != nil {
			return
		}
		if strings.ContainsAny(id, ".*> \t\r\n/") {
			t.Fatalf("accepted id %q is not a single safe token", id)
		}
		subj, err := n.SchedSubject(id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := n.ParseSchedSubject(subj)
		if err != nil || got != id {
			t.Fatalf("ParseSchedSubject(%q) = %q, %v", subj, got, err)
		}
	})
}

// FuzzDecodeMeta checks that header decoding never panics and that what it
// accepts encodes and decodes to the same metadata.
func FuzzDecodeMeta(f *testing.F) {
	f.Add("id-1", "3", "30s", "key", "1h")
	f.Add("a.b", "x", "soon", "", "")
	f.Add("", "-1", "0s", "", "5m")
	f.Fuzz(func(t *testing.T, id, retries, timeout, ukey, uttl string) {
		h := nats.Header{}
		for k, v := range map[string]string{spool.HeaderTaskID: id, spool.HeaderMaxRetries: retries,
			spool.HeaderTimeout: timeout, spool.HeaderUniqueKey: ukey, spool.HeaderUniqueTTL: uttl} {
			if v != "" {
				h.Set(k, v)
			}
		}
		m, err := spool.DecodeMeta(h)
		if err != nil {
			return
		}
		h2 := nats.Header{}
		if err := m.Encode(h2); err != nil {
			t.Fatalf("decoded meta %+v does not encode: %v", m, err)
		}
		m2, err := spool.DecodeMeta(h2)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if m2.ID != m.ID || m2.Timeout != m.Timeout || m2.UniqueKey != m.UniqueKey || m2.UniqueTTL != m.UniqueTTL ||
			(m.MaxRetries == nil) != (m2.MaxRetries == nil) || (m.MaxRetries != nil && *m.MaxRetries != *m2.MaxRetries) {
			t.Fatalf("round trip %+v → %+v", m, m2)
		}
	})
}
