package consumer

import (
	"context"
	"strings"
	"time"

	"github.com/spoolq/spool/streams"
)

// Where workers pull by type, the consumer of one exact type whose
// flow-control rule sets a concurrency limit carries the limit as its
// MaxAckPending (streams.ConcurrencyCap): the server then holds the
// limit, so a full limit costs no pull and no hand-back. The leases stay
// the exact fleet-wide guard. The worker sets the caps of the consumers
// it pulls at start and after each change of the rules, and a task the
// server delivered under such a cap waits in the worker for the slot a
// moment before it is freed (capWait) instead of going to the waiting
// room.

// capWait is the longest a task delivered under its limit's cap waits in
// the worker for a slot (at most half its admission budget): the slot
// of the task whose ack let the server deliver it is usually freed
// within a round trip.
const capWait = time.Second

// capLanes sets the MaxAckPending of the exact-type consumers the worker
// pulls to their concurrency caps for the rules in force (rule), and
// records the caps the dispatcher plans its pulls with. A consumer whose
// cap could not be set is logged and tried again at the next change.
func (d *dispatcher) capLanes(ctx context.Context, rule streams.RuleOf) {
	if d.tasks == nil {
		return
	}
	taskCfg := d.tasks.CachedInfo().Config
	if streams.ConsumersOf(taskCfg) != streams.ConsumersByType {
		return
	}
	base := streams.ConcurrencyCap(taskCfg, ">", rule)
	for i := range d.lanes {
		ln := &d.lanes[i]
		name := ln.cons.CachedInfo().Name
		_, pattern, ok := d.o.Names.ParseTypeConsumer(name)
		if !ok || strings.ContainsAny(pattern, "*>") {
			continue
		}
		want := streams.ConcurrencyCap(taskCfg, pattern, rule)
		d.mu.Lock()
		have := ln.maxAck
		d.mu.Unlock()
		if want != have {
			cctx, cancel := context.WithTimeout(ctx, d.o.IOTimeout)
			_, err := streams.CapConsumer(cctx, d.o.Names, ln.stream, taskCfg, name, rule)
			cancel()
			if err != nil {
				d.log.WarnContext(ctx, "setting the concurrency cap of a type consumer", "consumer", name, "max_ack_pending", want, "error", err)
				continue
			}
			d.log.InfoContext(ctx, "type consumer capped by its concurrency limit", "consumer", name, "max_ack_pending", want)
		}
		d.mu.Lock()
		ln.maxAck = want
		ln.limit = 0
		if want != base {
			ln.limit = want
		}
		d.mu.Unlock()
	}
}

// roomLocked is how many more tasks the server delivers from lane i now as
// far as this worker knows, when its consumer carries a concurrency cap:
// the cap less the lane's tasks the worker holds (running, waiting for a
// slot or queued). -1 when the lane has no cap. d.mu is held.
func (d *dispatcher) roomLocked(i int) int {
	ln := &d.lanes[i]
	if ln.limit <= 0 {
		return -1
	}
	return max(0, ln.limit-ln.held)
}
