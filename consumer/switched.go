package consumer

import (
	"context"

	"github.com/spoolq/spool/streams"
)

// retireIfSwitched handles a priority consumer that refresh no longer
// finds. Provisioning with SPOOL_CONSUMERS=type removes the priority
// consumers while workers that started pulling by priority may still run,
// as in a rolling upgrade. Such a worker does not make its consumer again:
// on a WorkQueue stream it would take the tasks of types other workers now
// pull by type, or be refused for overlapping their consumers. It stops
// pulling the lane for good, says once why and how to recover (a restart
// reads the mode and pulls by type), and stays up to finish and settle
// what it runs. It reports whether the lane is retired; a worker that
// pulls by type, or a stream that still records pulling by priority,
// leaves the lane as it is.
func (d *dispatcher) retireIfSwitched(lane int) bool {
	if d.patterns != nil || d.isStopping() {
		return false
	}
	ctx, cancel := context.WithTimeout(d.ioCtx, d.o.IOTimeout)
	defer cancel()
	info, err := d.tasks.Info(ctx)
	if err != nil || streams.ConsumersOf(info.Config) != streams.ConsumersByType {
		return false
	}
	ln := &d.lanes[lane]
	d.mu.Lock()
	ln.retired = true
	d.mu.Unlock()
	stream := ln.stream.CachedInfo().Config.Name
	consumer := ln.cons.CachedInfo().Name
	d.switched.Do(func() {
		d.log.Error("the deployment now pulls by type ("+streams.ConsumersKey+": "+streams.ConsumersByType+") and removed the priority consumers this worker pulled: it does not make them again and takes no more tasks; restart it to pull by type",
			"stream", stream, "consumer", consumer)
	})
	d.log.Debug("priority consumer removed: lane retired", "stream", stream, "consumer", consumer)
	return true
}
