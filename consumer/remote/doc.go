// Package remote serves Spool task types over NATS request-reply, so a
// handler can be written in any language with a NATS client.
//
// Handler returns a consumer.Handler that sends one request per attempt to
// a subject and turns the reply into a result or an error; the reply
// contract (request headers, Spool-Error and Spool-Permanent in the reply)
// is documented on Handler:
//
//	mux.Handle("image.resize", remote.Handler(nc, "spool.remote.image.resize"))
package remote
