// Package faults holds Spool's fault-injection suite: real nats-servers
// (embedded, one node or a 3-node cluster), real worker processes
// (tests/cmd/spool-faultworker, built once per run; the type fleet also
// runs the released spool-consumer and spool-admin) that are killed with
// SIGKILL, paused with SIGSTOP and restarted, servers stopped and restarted
// on their stores, and poison input from every entry point. Every scenario
// ends with the checker (tests/checker): nothing acknowledged may be lost
// or stuck, and duplicate executions are counted with their cause.
//
// `make test` runs every scenario at its bounded size; `make soak` sets
// SPOOL_SOAK=1, which multiplies task counts and fault rounds and runs the
// worker-crash, flow-control and election scenarios on a 3-node cluster
// with sync_interval: always and everything at R3. The suite
// prints one table at the end of the package run.
package faults
