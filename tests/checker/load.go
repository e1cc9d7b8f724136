package checker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	spool "github.com/spoolq/spool/shared"
	"github.com/spoolq/spool/shared/jsproto"
)

// LoadResults feeds c the latest result document of every task in the
// results bucket and returns how many it read.
func LoadResults(ctx context.Context, js jetstream.JetStream, names spool.Names, c *Checker) (int, error) {
	kv, err := js.KeyValue(ctx, names.ResultsBucket())
	if err != nil {
		return 0, fmt.Errorf("opening results bucket %q: %w", names.ResultsBucket(), err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("watching results bucket: %w", err)
	}
	defer func() { _ = w.Stop() }() // stopping a read-only watch cannot lose anything
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n, fmt.Errorf("reading results after %d documents: %w", n, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return n, errors.New("results watch ended early")
			}
			if e == nil { // every current value has been delivered
				return n, nil
			}
			var doc spool.Result
			if err := json.Unmarshal(e.Value(), &doc); err != nil {
				return n, fmt.Errorf("decoding result %q: %w", e.Key(), err)
			}
			if doc.ID != e.Key() {
				return n, fmt.Errorf("result under key %q has id %q", e.Key(), doc.ID)
			}
			c.Result(doc)
			n++
		}
	}
}

// LoadResultsAtLeader looks up, at the results bucket's leader, the
// result document of each of ids (tasks LoadResults found none for), feeds
// c those it finds, and returns how many. A watch is an ephemeral consumer
// the server may place on any replica of the bucket, including one that
// lags after a node restart: it then ends its initial values with what
// that replica holds, and the documents it lacks look lost. The leader's
// answer is the bucket's state; direct gets, which any replica serves, are
// not used.
func LoadResultsAtLeader(ctx context.Context, js jetstream.JetStream, names spool.Names, c *Checker, ids []string) (int, error) {
	bucket := names.ResultsBucket()
	subject := "$JS.API.STREAM.MSG.GET.KV_" + bucket
	n := 0
	for _, id := range ids {
		req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + id})
		if err != nil {
			return n, err
		}
		var resp struct {
			Error   *jetstream.APIError `json:"error"`
			Message *struct {
				Header []byte `json:"hdrs"`
				Data   []byte `json:"data"`
			} `json:"message"`
		}
		// Each try is short and tried again within ctx: a request a
		// leader election swallows is never answered.
		var msg []byte
		err = jsproto.Tries{}.Do(ctx, "reading a result at the leader", func(ctx context.Context) error {
			m, err := js.Conn().RequestWithContext(ctx, subject, req)
			if err == nil {
				msg = m.Data
			}
			return err
		})
		if err != nil {
			return n, fmt.Errorf("reading the result of %q at the leader: %w", id, err)
		}
		if err := json.Unmarshal(msg, &resp); err != nil {
			return n, fmt.Errorf("reading the result of %q at the leader: %w", id, err)
		}
		if resp.Error != nil {
			if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
				continue
			}
			return n, fmt.Errorf("reading the result of %q at the leader: %w", id, resp.Error)
		}
		if resp.Message == nil || bytes.Contains(resp.Message.Header, []byte("KV-Operation")) {
			continue // deleted or purged
		}
		var doc spool.Result
		if err := json.Unmarshal(resp.Message.Data, &doc); err != nil {
			return n, fmt.Errorf("decoding result %q: %w", id, err)
		}
		if doc.ID != id {
			return n, fmt.Errorf("result under key %q has id %q", id, doc.ID)
		}
		c.Result(doc)
		n++
	}
	return n, nil
}

// LoadDeadLetters feeds c every message of the dead-letter stream and
// returns how many it read.
func LoadDeadLetters(ctx context.Context, js jetstream.JetStream, names spool.Names, c *Checker) (int, error) {
	s, err := js.Stream(ctx, names.DLQStream())
	if err != nil {
		return 0, fmt.Errorf("opening dead-letter stream %q: %w", names.DLQStream(), err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading dead-letter stream info: %w", err)
	}
	total := info.State.Msgs
	if total == 0 {
		return 0, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, fmt.Errorf("reading dead-letter stream: %w", err)
	}
	n := 0
	for uint64(n) < total {
		batch, err := cons.Fetch(min(int(total)-n, 500), jetstream.FetchContext(ctx))
		if err != nil {
			return n, fmt.Errorf("reading dead letters after %d: %w", n, err)
		}
		for m := range batch.Messages() {
			h := m.Headers()
			attempts, _ := strconv.Atoi(h.Get(spool.HeaderAttempts)) // 0 when absent or malformed
			// The result key of the task: its id when valid, else its
			// sequence in the task stream (Names.TaskID). Nats-Msg-Id
			// is stripped from dead letters.
			id := h.Get(spool.HeaderTaskID)
			if spool.ValidateID(id) != nil {
				id = h.Get(spool.HeaderOriginalSeq)
			}
			c.DeadLetter(id, DeadLetter{Reason: spool.Reason(h.Get(spool.HeaderReason)), Attempts: attempts})
			n++
		}
		if err := batch.Error(); err != nil {
			return n, fmt.Errorf("reading dead letters after %d: %w", n, err)
		}
	}
	return n, nil
}
