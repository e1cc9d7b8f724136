// Package observability holds end-to-end tests of what an operator sees:
// traces that follow a task from its enqueue to every attempt across a real
// server.
package observability
