// Package service registers a Spool worker as an instance of the NATS micro
// service spool-consumer (fleet.ServiceName), so `nats micro ls`, `nats
// micro info spool-consumer` and `nats micro stats spool-consumer` list the
// fleet, and the dashboard and spool-admin read each worker's figures.
//
// Add registers the service with one endpoint, "stats" (Subject), which
// answers with the worker's live figures written with the shared/fleet
// types (fleet.WorkerStats, plus fleet.RouterStats when a DLQ router runs
// beside the worker, see WithRouter); the same figures fill the endpoint's
// data in $SRV.STATS replies. The service metadata names the worker and the
// prefix, and declares the conformance level of the wire contract the Go
// worker meets, conformance: full (fleet.MetadataConformance).
//
//	svc, err := service.Add(nc, w, service.WithRouter(r))
//	if err != nil { ... }
//	defer svc.Stop()
package service
