// Package cli tests Spool's commands as a user meets them, with the real
// binaries against real embedded NATS servers:
//
//   - testdata/*.txtar are testscript scripts (the Go toolchain's style of
//     CLI test), one per command family: their output, exit codes and
//     error messages;
//   - TestREADME runs the shell blocks of README.md that talk to a running
//     stack against a dev stack, comparing the output the README shows, so
//     a stale example fails the tests. Blocks that cannot run here are
//     listed in readmeExcluded with the reason.
//
// TestMain builds spool-producer, spool-admin, spool-consumer, spool-dev and
// the Go example programs of examples/go once (with -race, reusing the test
// build's cache).
package cli
