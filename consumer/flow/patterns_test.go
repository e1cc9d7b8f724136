package flow_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spoolq/spool/consumer/flow"
	"github.com/spoolq/spool/shared/limits"
	"github.com/spoolq/spool/streams"
	"github.com/spoolq/spool/streams/streamstest"
)

// A pattern rule written raw under its KV key (as the nats CLI would) is
// in force for the types it matches, each limited on its own; Usage shows
// the pattern's row, summed, then a row per type it governs; deleting the
// exact rule of a type hands the type to the pattern, deleting the
// pattern lifts the limit.
func TestPatternRuleView(t *testing.T) {
	t.Parallel()
	e := streamstest.Start(t, streams.Settings{})
	ctx := streamstest.Context(t)
	kv, err := e.JS.KeyValue(ctx, e.Names.LimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "mail.=any", []byte(`{"concurrency":1}`)); err != nil {
		t.Fatal(err)
	}
	putRule(t, e, limits.Rule{Type: "mail.vip", Concurrency: 2})
	l := newLimiter(t, e, "a", 5*time.Second)
	defer l.Close()
	if r, ok := l.Rule("mail.a"); !ok || r.Type != "mail.a" || r.Concurrency != 1 {
		t.Fatalf("Rule(mail.a) = %+v, %v: want the pattern's concurrency 1 as mail.a", r, ok)
	}
	var denied *flow.DeniedError
	for _, typ := range []string{"mail.a", "mail.b", "mail.vip", "mail.vip"} {
		if _, err := l.Acquire(ctx, typ, "", "t-"+typ); err != nil {
			t.Fatalf("acquire %s: %v", typ, err)
		}
	}
	for _, typ := range []string{"mail.a", "mail.b", "mail.vip"} {
		if _, err := l.Acquire(ctx, typ, "", "again"); !errors.As(err, &denied) {
			t.Fatalf("acquire %s over its limit: %v, want a DeniedError", typ, err)
		}
	}
	st, err := limits.Open(ctx, e.JS, e.Names)
	if err != nil {
		t.Fatal(err)
	}
	us, err := st.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, u := range us {
		rows = append(rows, fmt.Sprintf("%s via %q: %d/%d", u.Rule.Type, u.Via, u.Running, u.Rule.Concurrency))
	}
	want := `[mail.vip via "": 2/2 mail.* via "": 2/1 mail.a via "mail.*": 1/1 mail.b via "mail.*": 1/1]`
	if fmt.Sprint(rows) != want {
		t.Errorf("usage rows %v, want %s", rows, want)
	}
	if r, err := st.Resolve(ctx, "mail.vip"); err != nil || r.Type != "mail.vip" {
		t.Errorf("Resolve(mail.vip) = %q, %v", r.Type, err)
	}
	if r, err := st.Resolve(ctx, "mail.c"); err != nil || r.Type != "mail.*" {
		t.Errorf("Resolve(mail.c) = %q, %v", r.Type, err)
	}
	if _, err := st.Resolve(ctx, "sms.send"); !errors.Is(err, limits.ErrNoRule) {
		t.Errorf("Resolve(sms.send): %v, want ErrNoRule", err)
	}
	if err := st.Delete(ctx, "mail.vip"); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, time.Second, func() error {
		if r, _ := l.Rule("mail.vip"); r.Concurrency != 1 {
			return fmt.Errorf("mail.vip concurrency %d, want the pattern's 1", r.Concurrency)
		}
		return nil
	})
	if err := st.Delete(ctx, "mail.*"); err != nil {
		t.Fatal(err)
	}
	streamstest.WaitFor(t, time.Second, func() error {
		if _, ok := l.Rule("mail.a"); ok {
			return errors.New("mail.a still limited")
		}
		return nil
	})
}
