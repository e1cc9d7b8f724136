// Package conformancekit runs the conformance kit, spool-conformance, the
// way a user of another language does: against the Go producer driver at
// the producer level and the Go worker at the core and full levels, each a
// built binary. It also runs the kit against a worker broken on purpose, to
// show that the kit fails it.
package conformancekit
