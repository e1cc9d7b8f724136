package jsproto

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MsgGetRequest selects the stored message a GetMsg asks for: by stream
// sequence, or the last message on a subject.
type MsgGetRequest struct {
	Seq        uint64 `json:"seq,omitempty"`
	LastBySubj string `json:"last_by_subj,omitempty"`
}

// StoredMsg is the message a GetMsg found: its stream sequence and its
// data (empty for a KV delete marker).
type StoredMsg struct {
	Seq  uint64 `json:"seq"`
	Data []byte `json:"data"`
}

// GetMsg asks stream's leader for one stored message through the
// JetStream API ($JS.API.STREAM.MSG.GET.<stream>). Only the leader answers
// that request; a direct get (nats.go's KV Get on a bucket that allows
// them) may be answered by any replica, a lagging one included, such as a
// node catching up after a restart. found is false when the stream holds
// no such message. The caller's role needs the right to publish to the
// request's subject (deploy/nats/auth.conf).
func GetMsg(ctx context.Context, nc *nats.Conn, stream string, req MsgGetRequest) (m StoredMsg, found bool, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return m, false, err
	}
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return m, false, err
	}
	var resp struct {
		Message *StoredMsg          `json:"message"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return m, false, fmt.Errorf("decoding the answer of stream %s: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return m, false, nil
	case resp.Error != nil:
		return m, false, resp.Error
	case resp.Message == nil:
		return m, false, nil
	}
	return *resp.Message, true, nil
}
