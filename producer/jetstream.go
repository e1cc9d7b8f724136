package producer

import "github.com/nats-io/nats.go/jetstream"

// JetStream returns the JetStream context the client publishes with (its
// Conn() is the client's connection), for read-only companions such as the
// broker's dashboard. Closing the connection stays the caller's business.
func (c *Client) JetStream() jetstream.JetStream { return c.js }
