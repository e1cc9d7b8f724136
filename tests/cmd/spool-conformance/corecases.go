package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	spool "github.com/spoolq/spool/shared"
)

// coreCases are the core worker's cases.
func coreCases() []Case {
	return []Case{
		{Name: "core/consumers", Level: Core, Section: secPull, Run: caseConsumers, Consumers: "type"},
		{Name: "core/complete", Level: Core, Section: secWork, Run: caseComplete},
		{Name: "core/output-text", Level: Core, Section: secOutput, Run: caseOutput([]byte("plain text, not JSON"), spool.ResultEncodingText)},
		{Name: "core/output-binary", Level: Core, Section: secOutput, Run: caseOutput([]byte{0xff, 0xfe, 0x00, 0x01, 'x'}, spool.ResultEncodingBase64)},
		{Name: "core/discarded-result", Level: Core, Section: secDiscarded, Run: caseDiscardedResult},
		{Name: "core/retry", Level: Core, Section: secWork, Run: caseRetry},
		{Name: "core/retry-after", Level: Core, Section: secVerdicts, Run: caseRetryAfter},
		{Name: "core/dead-exhausted", Level: Core, Section: secDead, Run: caseDeadExhausted},
		{Name: "core/dead-permanent", Level: Core, Section: secDead, Run: caseDeadPermanent},
		{Name: "core/bad-input", Level: Core, Section: secTasks, Run: caseBadInput},
		{Name: "core/repeating-schedule", Level: Core, Section: secDelayed, Run: caseRepeatingSchedule},
		{Name: "core/timeout", Level: Core, Section: secWork, Run: caseTimeout},
		{Name: "core/heartbeat", Level: Core, Section: secWork, Run: caseHeartbeat},
		{Name: "core/pull-what-can-start", Level: Core, Section: secWork, Run: casePullWhatCanStart},
		{Name: "core/cancel-running", Level: Core, Section: secCancel, Run: caseCancelRunning},
		{Name: "core/cancel-before-start", Level: Core, Section: secCancel, Run: caseCancelBeforeStart},
		{Name: "core/crash-redelivery", Level: Core, Section: secWork, Run: caseCrash},
		{Name: "core/stored-outcome", Level: Core, Section: secWork, Run: caseStoredOutcome},
		{Name: "core/unique-release", Level: Core, Section: secUnique, Run: caseUniqueRelease},
		{Name: "core/unique-foreign", Level: Core, Section: secUnique, Run: caseUniqueForeign},
	}
}

// caseConsumers: the worker pulls every type it serves at every priority
// and no other type.
func caseConsumers(ctx context.Context, k *Kit) error {
	if err := k.waitServing(ctx, k.servedTypes()); err != nil {
		return err
	}
	for _, typ := range []string{TypeUnserved, TypeOther} {
		for _, p := range spool.Priorities {
			subj, err := k.names.TaskSubject(p, typ)
			if err != nil {
				return err
			}
			if ci, err := k.consumerFor(ctx, subj); err == nil {
				return fmt.Errorf("consumer %s (filter %s) delivers %s, a type the worker does not serve", ci.Name, ci.Config.FilterSubject, subj)
			}
		}
	}
	return nil
}

// caseComplete: a JSON output is stored as the result, then the task acked.
func caseComplete(ctx context.Context, k *Kit) error {
	id := k.id("echo")
	body := []byte(`{"hello":"world","n":[1,2,3]}`)
	seq, err := k.publish(ctx, spool.High, TypeEcho, id, body, nil)
	if err != nil {
		return err
	}
	s, err := k.settled(ctx, id, seq, spool.StateCompleted)
	if err != nil {
		return err
	}
	d := s.Doc
	switch {
	case !sameJSON(d.Result, body) || d.ResultEncoding != "":
		return fmt.Errorf("result %s (encoding %q), want the payload %s as is", d.Result, d.ResultEncoding, body)
	case d.Attempts != 1:
		return fmt.Errorf("attempts %d, want 1", d.Attempts)
	case d.Type != TypeEcho || d.Priority != spool.High:
		return fmt.Errorf("type %q priority %q, want %s high", d.Type, d.Priority, TypeEcho)
	}
	ack := s.Acks[len(s.Acks)-1]
	md := ackTime(ack)
	if !d.EnqueuedAt.Equal(md) {
		return fmt.Errorf("enqueued_at %s, want the message's stream timestamp %s", d.EnqueuedAt.Format(time.RFC3339Nano), md.Format(time.RFC3339Nano))
	}
	return nil
}

// caseOutput: an output that is not JSON is stored as a JSON string with
// its encoding, text for UTF-8 and base64 for other bytes.
func caseOutput(body []byte, enc string) func(context.Context, *Kit) error {
	want := string(body)
	if enc == spool.ResultEncodingBase64 {
		want = base64.StdEncoding.EncodeToString(body)
	}
	return func(ctx context.Context, k *Kit) error {
		_, _, s, err := k.runTask(ctx, spool.Normal, TypeEcho, "output", body, nil, spool.StateCompleted)
		if err != nil {
			return err
		}
		var got string
		if err := json.Unmarshal(s.Doc.Result, &got); err != nil || got != want || s.Doc.ResultEncoding != enc {
			return fmt.Errorf("result %s with encoding %q, want %q with encoding %s", s.Doc.Result, s.Doc.ResultEncoding, want, enc)
		}
		return nil
	}
}

// caseRetry: failed attempts write retrying and NAK with a delay; the
// third attempt completes.
func caseRetry(ctx context.Context, k *Kit) error {
	_, _, s, err := k.runTask(ctx, spool.Normal, TypeFail, "fail", payload(map[string]int{"succeed_at": 3}), header(spool.HeaderMaxRetries, "5"), spool.StateCompleted)
	if err != nil {
		return err
	}
	if s.Doc.Attempts != 3 {
		return fmt.Errorf("attempts %d, want 3", s.Doc.Attempts)
	}
	if err := wantAttempt(s.Doc.Result, 3); err != nil {
		return err
	}
	for n := 1; n <= 2; n++ {
		i := slices.IndexFunc(s.Docs, func(d Doc) bool { return d.Result.State == spool.StateRetrying && d.Result.Attempts == n })
		if i < 0 {
			return fmt.Errorf("no retrying document of attempt %d (states written: %v)", n, states(s.Docs))
		}
		if d := s.Docs[i].Result; d.Error == "" || d.NextAttempt == nil {
			return fmt.Errorf("retrying document of attempt %d lacks error or next_attempt_at: %+v", n, d)
		}
		j := slices.IndexFunc(s.Acks, func(a Ack) bool { return a.Kind() == "-NAK" && a.Delivered == uint64(n) })
		if j < 0 {
			return fmt.Errorf("no -NAK at delivery %d (acks: %v)", n, kinds(s.Acks))
		}
		var delay struct {
			Delay int64 `json:"delay"`
		}
		_, body, _ := strings.Cut(s.Acks[j].Body, " ")
		if err := json.Unmarshal([]byte(body), &delay); err != nil || delay.Delay <= 0 {
			return fmt.Errorf("-NAK at delivery %d is %q, want a delay in nanoseconds", n, s.Acks[j].Body)
		}
	}
	return nil
}

// caseDeadExhausted: the last allowed attempt fails: dead letter, dead
// document with reason error, term.
func caseDeadExhausted(ctx context.Context, k *Kit) error {
	id := k.id("exhausted")
	body := payload(map[string]int{"succeed_at": 99})
	seq, err := k.publish(ctx, spool.Normal, TypeFail, id, body, header(spool.HeaderMaxRetries, "1"))
	if err != nil {
		return err
	}
	s, err := k.settled(ctx, id, seq, spool.StateDead)
	if err != nil {
		return err
	}
	if s.Doc.Reason != spool.ReasonError || s.Doc.Attempts != 2 || s.Doc.Error == "" {
		return fmt.Errorf("dead document: reason %q attempts %d error %q, want error, 2 and the handler's error", s.Doc.Reason, s.Doc.Attempts, s.Doc.Error)
	}
	return k.checkDeadLetter(ctx, s, id, seq, spool.Normal, TypeFail, body, spool.ReasonError, 2, nil)
}

// caseDeadPermanent: a do-not-retry failure is dead at once, its dead
// letter carrying the task's own headers.
func caseDeadPermanent(ctx context.Context, k *Kit) error {
	id := k.id("fatal")
	body := []byte(`{"why":"conformance"}`)
	seq, err := k.publish(ctx, spool.Critical, TypeFatal, id, body, header("X-Conformance", "carried", spool.HeaderMaxRetries, "4"))
	if err != nil {
		return err
	}
	s, err := k.settled(ctx, id, seq, spool.StateDead)
	if err != nil {
		return err
	}
	if s.Doc.Reason != spool.ReasonPermanent || s.Doc.Attempts != 1 {
		return fmt.Errorf("dead document: reason %q attempts %d, want permanent and 1", s.Doc.Reason, s.Doc.Attempts)
	}
	return k.checkDeadLetter(ctx, s, id, seq, spool.Critical, TypeFatal, body, spool.ReasonPermanent, 1, map[string]string{"X-Conformance": "carried", spool.HeaderMaxRetries: "4"})
}

// caseBadInput: a task whose headers do not decode is dead bad_input.
func caseBadInput(ctx context.Context, k *Kit) error {
	id, seq, s, err := k.runTask(ctx, spool.Normal, TypeEcho, "bad", []byte(`{}`), header(spool.HeaderMaxRetries, "many"), spool.StateDead)
	if err != nil {
		return err
	}
	if s.Doc.Reason != spool.ReasonBadInput {
		return fmt.Errorf("dead document: reason %q, want bad_input", s.Doc.Reason)
	}
	return k.checkDeadLetter(ctx, s, id, seq, spool.Normal, TypeEcho, []byte(`{}`), spool.ReasonBadInput, 1, nil)
}

// caseTimeout: an attempt past its Spool-Timeout on the last attempt is
// dead with reason timeout.
func caseTimeout(ctx context.Context, k *Kit) error {
	id := k.id("timeout")
	seq, err := k.publish(ctx, spool.Normal, TypeSlow, id, payload(map[string]int{"ms": 20000}),
		header(spool.HeaderTimeout, "300ms", spool.HeaderMaxRetries, "0"))
	if err != nil {
		return err
	}
	s, err := k.settled(ctx, id, seq, spool.StateDead)
	if err != nil {
		return err
	}
	if s.Doc.Reason != spool.ReasonTimeout {
		return fmt.Errorf("dead document: reason %q (error %q), want timeout", s.Doc.Reason, s.Doc.Error)
	}
	return nil
}

// checkDeadLetter checks the stored dead letter of a task and that it was
// published before the dead document.
func (k *Kit) checkDeadLetter(ctx context.Context, s Settled, id string, seq uint64, p spool.Priority, typ string, body []byte, reason spool.Reason, attempts int, carried map[string]string) error {
	m, err := k.deadLetter(ctx, id)
	if err != nil {
		return err
	}
	taskSubj, err := k.names.TaskSubject(p, typ)
	if err != nil {
		return err
	}
	dlqSubj, err := k.names.DLQSubject(p, typ)
	if err != nil {
		return err
	}
	// The headers as the worker published them: a stored message read
	// back carries the headers the server adds to a direct get.
	dl := slices.IndexFunc(s.Recs, func(r Record) bool { return r.Subject == dlqSubj && r.Header.Get(spool.HeaderTaskID) == id })
	if dl < 0 {
		return fmt.Errorf("the dead letter of %s is stored but the kit did not see it published on %s", id, dlqSubj)
	}
	h := s.Recs[dl].Header
	var bad []string
	check := func(name, got, want string) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s %q, want %q", name, got, want))
		}
	}
	check("subject", m.Subject, dlqSubj)
	check("body", string(m.Data), string(body))
	check(spool.HeaderReason, h.Get(spool.HeaderReason), string(reason))
	check(spool.HeaderAttempts, h.Get(spool.HeaderAttempts), strconv.Itoa(attempts))
	check(spool.HeaderOriginalSubject, h.Get(spool.HeaderOriginalSubject), taskSubj)
	check(spool.HeaderOriginalSeq, h.Get(spool.HeaderOriginalSeq), strconv.FormatUint(seq, 10))
	check(spool.HeaderMsgID, h.Get(spool.HeaderMsgID), fmt.Sprintf("dlq-%s-%d", k.names.TaskStream(), seq))
	if _, err := time.Parse(time.RFC3339Nano, h.Get(spool.HeaderFailedAt)); err != nil {
		bad = append(bad, fmt.Sprintf("%s %q is not an RFC 3339 time", spool.HeaderFailedAt, h.Get(spool.HeaderFailedAt)))
	}
	if e := h.Get(spool.HeaderError); strings.ContainsAny(e, "\r\n") || (reason != spool.ReasonBadInput && e == "") {
		bad = append(bad, fmt.Sprintf("%s %q: want the error, without CR or LF", spool.HeaderError, e))
	}
	for name, want := range carried {
		check(name, h.Get(name), want)
	}
	for name := range h {
		if strings.HasPrefix(strings.ToLower(name), "nats-") && !strings.EqualFold(name, spool.HeaderMsgID) && !strings.EqualFold(name, "Nats-Expected-Stream") {
			bad = append(bad, "carries "+name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("dead letter of %s: %s", id, strings.Join(bad, "; "))
	}
	// The dead letter is published before the dead document is written.
	dd := slices.IndexFunc(s.Docs, func(d Doc) bool { return d.Result.State == spool.StateDead })
	if dd < 0 || s.Recs[dl].Idx > s.Docs[dd].Idx {
		return fmt.Errorf("the dead letter of %s was not published before its dead document", id)
	}
	return nil
}

// ackTime is the stream timestamp an ack subject carries.
func ackTime(a Ack) time.Time {
	tok := strings.Split(a.Subject, ".")
	// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>,
	// or the longer form with two more tokens after ACK.
	i := 7
	if len(tok) > 9 {
		i = 9
	}
	ns, err := strconv.ParseInt(tok[i], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
