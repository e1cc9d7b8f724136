package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// rawWorker is a worker of some task types written from docs/contract.md
// alone, as a client in another language would write it: core NATS
// requests to the JetStream API and the documents the contract describes,
// no Spool package. It serves one type pattern where workers pull by type:
// it makes (or binds) the pattern's consumer of each priority from the
// template SPOOL_TASKS records, joins a pause of the priority, pulls, runs,
// writes the result document over the revision it read, and acks. It
// handles no cancellation, type pause of a wider pattern or flow control:
// the scenario uses none on its types.
type rawWorker struct {
	nc      *nats.Conn
	prefix  string // the deployment's prefix
	pattern string // the type pattern served
	name    string // the worker name written into result documents
	// run is the handler: the task's id, type, payload and delivery count
	// in, its output (JSON) or an error out.
	run func(ctx context.Context, id, typ string, payload []byte, delivered int) ([]byte, error)

	ackWait   time.Duration
	consumers map[string]string // priority → consumer name
	wg        sync.WaitGroup
}

// rawPriorities are the priorities, most urgent first.
var rawPriorities = []string{"critical", "high", "normal", "low", "idle"}

// rawEscapes spells a type pattern inside a consumer name.
var rawEscapes = strings.NewReplacer(".", "~", "*", "+", ">", "^")

// rawAPIError is the error object of a JetStream API answer.
type rawAPIError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *rawAPIError) Error() string {
	return fmt.Sprintf("%s (%d, error code %d)", e.Description, e.Code, e.ErrCode)
}

// JetStream API error codes the worker acts on.
const (
	rawConsumerNotFound = 10014
	rawConsumerExists   = 10148 // action create, another configuration
	rawFilterNotUnique  = 10100 // an overlapping filter on the WorkQueue stream
	rawNoMessage        = 10037
	rawWrongLastSeq     = 10071
)

func (w *rawWorker) taskStream() string { return strings.ToUpper(w.prefix) + "_TASKS" }
func (w *rawWorker) bucket() string     { return w.prefix + "_results" }

// api sends one JetStream API request (body nil: empty) and decodes the
// answer into out; an answer carrying an error is returned as
// *rawAPIError. Each try waits 2s and is sent again, unchanged, while ctx
// lasts: an election may swallow a request.
func (w *rawWorker) api(ctx context.Context, subject string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	var msg *nats.Msg
	for {
		tryCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := w.nc.RequestWithContext(tryCtx, subject, data)
		cancel()
		if err == nil {
			msg = m
			break
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("%s: %w", subject, err)
		}
	}
	var answer struct {
		Error *rawAPIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &answer); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", subject, err)
	}
	if answer.Error != nil {
		return answer.Error
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(msg.Data, out)
}

// isAPIError reports whether err is the API error code.
func isAPIError(err error, code int) bool {
	var e *rawAPIError
	return errors.As(err, &e) && e.ErrCode == code
}

// start reads how workers pull and the consumer template from the task
// stream's metadata, then makes or binds the pattern's consumer of each
// priority.
func (w *rawWorker) start(ctx context.Context) error {
	var info struct {
		Config struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"config"`
	}
	if err := w.api(ctx, "$JS.API.STREAM.INFO."+w.taskStream(), nil, &info); err != nil {
		return fmt.Errorf("reading the task stream: %w", err)
	}
	md := info.Config.Metadata
	if md["spool_consumers"] != "type" {
		return fmt.Errorf("the task stream records spool_consumers %q: workers pull by priority there and must serve every type, a worker of %s alone cannot run", md["spool_consumers"], w.pattern)
	}
	w.ackWait = 30 * time.Second
	if d, err := time.ParseDuration(md["spool_ack_wait"]); err == nil && d > 0 {
		w.ackWait = d
	}
	maxDeliver, maxAckPending := 10, 100000
	if n, err := strconv.Atoi(md["spool_max_deliver"]); err == nil && n > 0 {
		maxDeliver = n
	}
	if n, err := strconv.Atoi(md["spool_max_ack_pending"]); err == nil && n > 0 {
		maxAckPending = n
	}
	w.consumers = map[string]string{}
	for _, p := range rawPriorities {
		name := w.prefix + "-" + p + "-" + rawEscapes.Replace(w.pattern)
		filter := w.prefix + ".tasks." + p + "." + w.pattern
		create := map[string]any{
			"stream_name": w.taskStream(),
			"action":      "create",
			"config": map[string]any{
				"durable_name":    name,
				"description":     "Spool workers pulling " + p + " tasks of " + w.pattern,
				"filter_subject":  filter,
				"deliver_policy":  "all",
				"ack_policy":      "explicit",
				"ack_wait":        w.ackWait.Nanoseconds(),
				"max_deliver":     maxDeliver,
				"max_ack_pending": maxAckPending,
				"max_waiting":     512,
				"replay_policy":   "instant",
			},
		}
		err := w.api(ctx, "$JS.API.CONSUMER.INFO."+w.taskStream()+"."+name, nil, nil)
		if isAPIError(err, rawConsumerNotFound) {
			// The filter in the subject too: the server holds the body to
			// it, and permissions can bound it.
			err = w.api(ctx, "$JS.API.CONSUMER.CREATE."+w.taskStream()+"."+name+"."+filter, create, nil)
			switch {
			case isAPIError(err, rawConsumerExists): // another worker made it meanwhile
				err = nil
			case isAPIError(err, rawFilterNotUnique):
				return fmt.Errorf("serving %s: another worker pulls an overlapping type pattern: %w", w.pattern, err)
			case err == nil:
				err = w.joinPause(ctx, p, name)
			}
		}
		if err != nil {
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		w.consumers[p] = name
	}
	return nil
}

// joinPause pauses the consumer just made while its priority, or its
// exact type, is paused: such a pause is a record of the pause bucket,
// priority=<priority> or the type, which holds until its until (none:
// until resumed; an undecodable record too). The consumer is paused until
// the later end.
func (w *rawWorker) joinPause(ctx context.Context, p, name string) error {
	keys := []string{"priority=" + p}
	if !strings.ContainsAny(w.pattern, "*>") {
		keys = append(keys, w.pattern)
	}
	var until time.Time
	for _, key := range keys {
		bucket := w.prefix + "_paused"
		getCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := w.nc.RequestWithContext(getCtx, "$JS.API.DIRECT.GET.KV_"+bucket+".$KV."+bucket+"."+key, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("reading pause %s: %w", key, err)
		}
		if status := m.Header.Get("Status"); status == "404" {
			continue
		} else if status != "" {
			return fmt.Errorf("reading pause %s: status %s %s", key, status, m.Header.Get("Description"))
		}
		if m.Header.Get("KV-Operation") != "" {
			continue // deleted or purged: resumed
		}
		end := rawForever
		var rec struct {
			Until *time.Time `json:"until"`
		}
		if json.Unmarshal(m.Data, &rec) == nil && rec.Until != nil {
			end = *rec.Until
		}
		if end.After(time.Now()) && end.After(until) {
			until = end
		}
	}
	if until.IsZero() {
		return nil
	}
	return w.api(ctx, "$JS.API.CONSUMER.PAUSE."+w.taskStream()+"."+name, map[string]time.Time{"pause_until": until}, nil)
}

// rawForever is the end of a pause without one.
var rawForever = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// serve pulls and works tasks until ctx ends, one slot per priority (how a
// worker shares slots between priorities is its own choice); wait returns
// once every slot stopped.
func (w *rawWorker) serve(ctx context.Context, fail func(error)) {
	for _, p := range rawPriorities {
		w.wg.Go(func() {
			if err := w.slot(ctx, p); err != nil && ctx.Err() == nil {
				fail(err)
			}
		})
	}
}

func (w *rawWorker) wait() { w.wg.Wait() }

// slot long-polls the priority's consumer for one task at a time and works
// it. The tasks and the pull's statuses arrive on an inbox of the slot's
// own: a task arrives with its own subject, not the inbox's, so a shared
// request-reply inbox could not tell whose it is.
func (w *rawWorker) slot(ctx context.Context, p string) error {
	inbox := w.nc.NewInbox()
	sub, err := w.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }() // the connection may be closed already
	pull := "$JS.API.CONSUMER.MSG.NEXT." + w.taskStream() + "." + w.consumers[p]
	for ctx.Err() == nil {
		if err := w.nc.PublishRequest(pull, inbox, []byte(`{"batch":1,"expires":500000000}`)); err != nil {
			return fmt.Errorf("pulling %s: %w", w.consumers[p], err)
		}
		// The pull ends with a task or a status (404 none, 408 expired,
		// 409 ended for another reason); one that gets neither in 3s was
		// lost, and the next pull replaces it.
		waitCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := sub.NextMsgWithContext(waitCtx)
		cancel()
		if err != nil {
			continue
		}
		if m.Header.Get("Status") != "" {
			continue
		}
		if err := w.work(ctx, p, m); err != nil {
			return err
		}
	}
	return nil
}

// rawDoc is the result document as the contract describes it.
type rawDoc struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Priority   string          `json:"priority"`
	State      string          `json:"state"`
	Attempts   int             `json:"attempts"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	NextAt     *time.Time      `json:"next_attempt_at,omitempty"`
	EnqueuedAt time.Time       `json:"enqueued_at"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Worker     string          `json:"worker"`
}

// work runs one delivered task and settles it: the result document first,
// then the ack.
func (w *rawWorker) work(ctx context.Context, p string, m *nats.Msg) error {
	// $JS.ACK.<stream>.<consumer>.<delivered>.<stream-seq>.<consumer-seq>.<timestamp-ns>.<pending>
	tok := strings.Split(m.Reply, ".")
	if len(tok) != 9 || tok[0] != "$JS" || tok[1] != "ACK" {
		return fmt.Errorf("ack subject %q is not the contract's", m.Reply)
	}
	delivered, _ := strconv.Atoi(tok[4])
	ts, _ := strconv.ParseInt(tok[7], 10, 64)
	typ := strings.TrimPrefix(m.Subject, w.prefix+".tasks."+p+".")
	id := m.Header.Get("Spool-Task-Id")
	if id == "" {
		id = m.Header.Get("Nats-Msg-Id")
	}
	if id == "" {
		id = tok[5]
	}
	prior, _ := strconv.Atoi(m.Header.Get("Spool-Prior-Attempts"))
	enqueued := time.Unix(0, ts).UTC()
	if at, err := time.Parse(time.RFC3339Nano, m.Header.Get("Spool-Enqueued-At")); err == nil {
		enqueued = at
	}
	rev, stored, err := w.stored(ctx, id)
	if err != nil {
		return err
	}
	if delivered > 1 && (stored == "completed" || stored == "dead") {
		return w.ack(ctx, m, "+ACK") // its ack was lost after the write
	}
	doc := rawDoc{ID: id, Type: typ, Priority: p, Attempts: delivered + prior, EnqueuedAt: enqueued,
		StartedAt: time.Now().UTC(), Worker: w.name}
	out, runErr := w.runBeating(ctx, m, id, typ, delivered)
	now := time.Now().UTC()
	if runErr != nil {
		// Attempts remain in this test's tasks: retrying, then a NAK
		// with the backoff.
		next := now.Add(200 * time.Millisecond)
		doc.State, doc.Error, doc.NextAt = "retrying", runErr.Error(), &next
		if err := w.write(ctx, doc, rev); err != nil {
			return err
		}
		return w.ack(ctx, m, `-NAK {"delay":200000000}`)
	}
	doc.State, doc.Result, doc.FinishedAt = "completed", out, &now
	if err := w.write(ctx, doc, rev); err != nil {
		return err
	}
	if err := w.ack(ctx, m, "+ACK"); err != nil {
		return err
	}
	event, err := json.Marshal(map[string]any{"event": "completed", "at": now, "task": doc})
	if err != nil {
		return err
	}
	return w.nc.Publish(w.prefix+".events.completed."+p+"."+id+"."+typ, event)
}

// runBeating runs the handler and sends +WPI every ack wait / 3 meanwhile.
func (w *rawWorker) runBeating(ctx context.Context, m *nats.Msg, id, typ string, delivered int) ([]byte, error) {
	done := make(chan struct{})
	var beats sync.WaitGroup
	beats.Go(func() {
		tick := time.NewTicker(w.ackWait / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				_ = m.Respond([]byte("+WPI")) // a lost beat is made good by the next
			}
		}
	})
	out, err := w.run(ctx, id, typ, m.Data, delivered)
	close(done)
	beats.Wait()
	return out, err
}

// stored reads the task's result document at the results stream's leader:
// its revision (0: none) and state.
func (w *rawWorker) stored(ctx context.Context, id string) (uint64, string, error) {
	var got struct {
		Message struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	err := w.api(ctx, "$JS.API.STREAM.MSG.GET.KV_"+w.bucket(), map[string]string{"last_by_subj": "$KV." + w.bucket() + "." + id}, &got)
	if isAPIError(err, rawNoMessage) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("reading the result of %s: %w", id, err)
	}
	var doc struct {
		State string `json:"state"`
	}
	if len(got.Message.Data) > 0 {
		if err := json.Unmarshal(got.Message.Data, &doc); err != nil {
			return 0, "", fmt.Errorf("decoding the result of %s: %w", id, err)
		}
	}
	return got.Message.Seq, doc.State, nil
}

// write stores doc over revision rev; when another writer came between,
// it reads the document again and writes over it, unless it is cancelled.
func (w *rawWorker) write(ctx context.Context, doc rawDoc, rev uint64) error {
	data, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	for {
		msg := nats.NewMsg("$KV." + w.bucket() + "." + doc.ID)
		msg.Data = data
		msg.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(rev, 10))
		var m *nats.Msg
		for {
			tryCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			m, err = w.nc.RequestMsgWithContext(tryCtx, msg)
			cancel()
			if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("writing the result of %s: %w", doc.ID, err)
		}
		var ack struct {
			Error *rawAPIError `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &ack); err != nil {
			return fmt.Errorf("writing the result of %s: %w", doc.ID, err)
		}
		if ack.Error == nil {
			return nil
		}
		if ack.Error.ErrCode != rawWrongLastSeq {
			return fmt.Errorf("writing the result of %s: %w", doc.ID, ack.Error)
		}
		var state string
		if rev, state, err = w.stored(ctx, doc.ID); err != nil {
			return err
		}
		if state == "cancelled" {
			return fmt.Errorf("task %s was cancelled: this test cancels nothing", doc.ID)
		}
	}
}

// ack sends an acknowledgement (+ACK, -NAK …) and waits for the server to
// confirm it.
func (w *rawWorker) ack(ctx context.Context, m *nats.Msg, body string) error {
	ackCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := w.nc.RequestWithContext(ackCtx, m.Reply, []byte(body)); err != nil {
		return fmt.Errorf("%s %s: %w", body, m.Reply, err)
	}
	return nil
}
