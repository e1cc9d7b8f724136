// Package fleet is the schema of what a consumer process reports about
// itself: the data of its NATS micro service STATS endpoint
// ($SRV.STATS.spool-consumer) and the answer of its stats endpoint. The
// consumer writes these types and every reader (the dashboard, spool-admin,
// a user's own code) decodes them with the same types; docs/contract.md
// documents the JSON.
//
// Durations are in nanoseconds on the wire (fields ending in _ns).
// Histograms share one set of bucket bounds, Bounds, so that several
// workers' histograms can be merged into a fleet-wide one.
package fleet
