// Package jsproto holds the parts of the JetStream client protocol Spool
// speaks itself because nats.go's API costs more per message; everything
// else uses nats.go.
//
// Three parts, each measured against nats.go (see BENCHMARKS.md), and a
// read nats.go has no call for:
//
//   - Publisher: publishes with a reply subject <inbox>.<token> of its
//     own, all answered on one wildcard subscription, and routes each
//     publish acknowledgement to its token, decoded by ParsePubAck without
//     reflection. It replaces PublishAsync's per-message future, channels,
//     timer and JSON decode. The producer's batches and the consumer's
//     result writes keep their bookkeeping on top of it.
//   - Pull requests and their statuses: PullRequest encodes a request for
//     $JS.API.CONSUMER.MSG.NEXT (NextSubject), and CheckStatus classifies
//     every status the server answers a pull with, as nats.go's own pull
//     consumer does: whether it ends the request normally, fails it, or
//     means the consumer is gone.
//   - ParseAckSubject and Msg: a delivered message's metadata read from its
//     ack subject without nats.go's allocations, and a jetstream.Msg over a
//     *nats.Msg received on a subscription of one's own.
//   - GetMsg: a stored message read at the stream's leader through the
//     JetStream API, where nats.go's KV reads are direct gets any replica
//     may answer.
package jsproto
