package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/limits"
)

// withRule stores a flow-control rule for typ while fn runs.
func (k *Kit) withRule(ctx context.Context, typ, rule string, fn func() error) error {
	kv, err := k.js.KeyValue(ctx, k.names.LimitsBucket())
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, typ, []byte(rule)); err != nil {
		return fmt.Errorf("storing the rule %s: %w", rule, err)
	}
	defer func() {
		_ = kv.Delete(context.WithoutCancel(ctx), typ) // the next cases run the type unlimited; a failure shows there
	}()
	return fn()
}

// completedRuns publishes n tasks of typ and returns their completed
// documents, sorted by start. A limited task may be handed back and run
// from a copy, so the documents, not the first messages, are followed.
func (k *Kit) completedRuns(ctx context.Context, typ, stem string, n int, body []byte) ([]spool.Result, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = k.id(stem)
		if _, err := k.publish(ctx, spool.Normal, typ, ids[i], body, nil); err != nil {
			return nil, err
		}
	}
	runs := make([]spool.Result, n)
	for i, id := range ids {
		r, err := k.waitState(ctx, id, spool.StateCompleted)
		if err != nil {
			return nil, err
		}
		if r.StartedAt == nil || r.FinishedAt == nil || r.Attempts != 1 {
			return nil, fmt.Errorf("completed document of %s: started_at %v finished_at %v attempts %d, want both times and attempt 1", id, r.StartedAt, r.FinishedAt, r.Attempts)
		}
		runs[i] = r
	}
	slices.SortFunc(runs, func(a, b spool.Result) int { return a.StartedAt.Compare(*b.StartedAt) })
	return runs, nil
}

// caseConcurrencyLimit: with a concurrency limit of 1, no two runs of the
// type overlap.
func caseConcurrencyLimit(ctx context.Context, k *Kit) error {
	return k.withRule(ctx, TypeSlow, `{"type":"`+TypeSlow+`","concurrency":1}`, func() error {
		runs, err := k.completedRuns(ctx, TypeSlow, "limited", 3, payload(map[string]int{"ms": 400}))
		if err != nil {
			return err
		}
		if over := overlap(runs); over > 1 {
			return fmt.Errorf("%d runs of %s at once (from started_at to finished_at), with a concurrency limit of 1", over, TypeSlow)
		}
		return nil
	})
}

// caseRateLimit: with a rate of 4 a second, burst 1, starts are at least
// 250ms apart (less a margin for clocks read in different places).
func caseRateLimit(ctx context.Context, k *Kit) error {
	const gap, margin = 250 * time.Millisecond, 50 * time.Millisecond
	return k.withRule(ctx, TypeEcho, `{"type":"`+TypeEcho+`","rate":{"limit":4,"period":"1s"}}`, func() error {
		runs, err := k.completedRuns(ctx, TypeEcho, "paced", 5, []byte(`{}`))
		if err != nil {
			return err
		}
		var starts []string
		for _, r := range runs {
			starts = append(starts, r.StartedAt.Format("15:04:05.000"))
		}
		for i := 1; i < len(runs); i++ {
			if d := runs[i].StartedAt.Sub(*runs[i-1].StartedAt); d < gap-margin {
				return fmt.Errorf("starts %s: %s after the one before, with a rate of 4/s", strings.Join(starts, " "), d)
			}
		}
		return nil
	})
}

// caseWorkflow: a workflow of two echo steps submitted over NATS ends
// completed, the second step getting the first one's result as input.
func caseWorkflow(ctx context.Context, k *Kit) error {
	wf := k.id("wf")
	doc := payload(map[string]any{"version": 1, "id": wf, "steps": []map[string]any{
		{"name": "first", "type": TypeEcho, "payload": map[string]int{"x": 1}},
		{"name": "second", "type": TypeEcho, "after": []string{"first"}, "inputs": true},
	}})
	if _, err := k.publish(ctx, spool.Normal, "_spool.workflow.submit", wf, doc, nil); err != nil {
		return err
	}
	sub, err := k.waitState(ctx, wf, spool.StateCompleted)
	if err != nil {
		return fmt.Errorf("the submission: %w", err)
	}
	if !sameJSON(sub.Result, payload(map[string]string{"workflow_id": wf})) {
		return fmt.Errorf("the submission's result %s, want {\"workflow_id\":%q}", sub.Result, wf)
	}
	if _, err := k.waitState(ctx, wf+"=first", spool.StateCompleted); err != nil {
		return err
	}
	second, err := k.waitState(ctx, wf+"=second", spool.StateCompleted)
	if err != nil {
		return err
	}
	var input struct {
		Inputs []json.RawMessage `json:"inputs"`
	}
	if err := json.Unmarshal(second.Result, &input); err != nil || len(input.Inputs) != 1 || !sameJSON(input.Inputs[0], []byte(`{"x":1}`)) {
		return fmt.Errorf("the second step echoed %s, want a step input whose inputs are [{\"x\":1}]", second.Result)
	}
	kv, err := k.js.KeyValue(ctx, k.names.WorkflowsBucket())
	if err != nil {
		return err
	}
	return poll(ctx, 50*time.Millisecond, func() error {
		e, err := kv.Get(ctx, wf+".wf")
		if err != nil {
			return fmt.Errorf("workflow record %s.wf: %w", wf, err)
		}
		var rec struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.State != "completed" {
			return fmt.Errorf("workflow record %s.wf is %s, want state completed", wf, e.Value())
		}
		return nil
	})
}

// caseOrderedKeys: the tasks of one key of an ordered type, enqueued on
// the key's held subject as a producer aware of the rule does, run one at
// a time in enqueue order.
func caseOrderedKeys(ctx context.Context, k *Kit) error {
	return k.withRule(ctx, TypeSlow, `{"type":"`+TypeSlow+`","ordered":"hold"}`, func() error {
		key := k.id("key")
		token := limits.EncodeKey(key)
		target, err := k.names.TaskSubject(spool.Normal, TypeSlow)
		if err != nil {
			return err
		}
		ids := make([]string, 4)
		for i := range ids {
			ids[i] = k.id("ordered")
			m := nats.NewMsg(k.names.HeldSubject(token, TypeSlow))
			m.Data = payload(map[string]int{"ms": 150})
			m.Header.Set(spool.HeaderMsgID, ids[i])
			m.Header.Set(spool.HeaderTaskID, ids[i])
			m.Header.Set(spool.HeaderKey, key)
			m.Header.Set(spool.HeaderHeldTarget, target)
			if _, err := k.js.PublishMsg(ctx, m); err != nil {
				return fmt.Errorf("holding task %s: %w", ids[i], err)
			}
		}
		if err := k.nc.Publish(k.names.KickSubject(token, TypeSlow), nil); err != nil {
			return fmt.Errorf("kicking key %s: %w", key, err)
		}
		runs := make([]spool.Result, len(ids))
		for i, id := range ids {
			if runs[i], err = k.waitState(ctx, id, spool.StateCompleted); err != nil {
				return err
			}
			if runs[i].StartedAt == nil || runs[i].FinishedAt == nil {
				return fmt.Errorf("completed document of %s lacks started_at or finished_at", id)
			}
		}
		for i := 1; i < len(runs); i++ {
			if runs[i].StartedAt.Before(*runs[i-1].FinishedAt) {
				return fmt.Errorf("%s (enqueued %d of %d) started at %s, before %s finished at %s: the key's tasks must run one at a time in enqueue order",
					runs[i].ID, i+1, len(runs), runs[i].StartedAt.Format(time.RFC3339Nano), runs[i-1].ID, runs[i-1].FinishedAt.Format(time.RFC3339Nano))
			}
		}
		return nil
	})
}
