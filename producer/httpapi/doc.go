// Package httpapi is Spool's HTTP broker: it lets callers that do not speak
// NATS enqueue tasks, read results, wait for them and cancel scheduled tasks.
// It is stateless; every piece of state lives in JetStream, so any number of
// brokers can run side by side.
//
// Routes (Go 1.22 ServeMux patterns):
//
//	POST   /v1/tasks             enqueue one task          201 (200 when a duplicate)
//	POST   /v1/tasks/batch       enqueue up to MaxBatch    200, per-task outcome (503 when none
//	                             got in, all for one server-side reason such as queue_full)
//	GET    /v1/tasks/{id}        result document           200, 404 not_found
//	GET    /v1/tasks/{id}?wait=10s  long-poll until the task is terminal: completed, dead or cancelled
//	GET    /v1/tasks/{id}/result the output, byte for byte 200, 204 empty, 409 not_completed
//	DELETE /v1/tasks/{id}        cancel a task             200, 404 not_found, 409 task_finished
//	GET    /v1/dlq               dead letters, one page    200 (?priority=&type=&reason=&since=&until=&limit=&after=)
//	GET    /v1/dlq/{seq}         one dead letter           200, 404 not_found
//	POST   /v1/dlq/{seq}/replay  replay to its subject     200, 404 not_found, 409 not_replayable
//	DELETE /v1/dlq?<filter>      purge matching letters    200, 400 filter_required (all=true purges all)
//	GET    /healthz              the process is up          200
//	GET    /readyz               NATS and the task stream   200, 503
//	GET    /v1/openapi.json      the OpenAPI 3.1 description
//	GET    /metrics              Prometheus metrics (behind the token when one is set)
//	GET    /v1/overview          what the dashboard shows  200, 503 unavailable
//	GET    /ui/                  the web dashboard (static files; the page asks for the token)
//
// Publishing and results go through a producer.Client; the dashboard, the
// queue figures on /metrics and the dead-letter routes read through a
// streams/admin Client. The broker caches what many callers poll: one
// overview per OverviewCacheTTL, one queue status per StatusCacheTTL.
//
// Errors are JSON: {"error":{"code":"invalid_priority","message":"...","field":"priority"}}
// with a stable code (see the Code constants), and for a unique-key conflict
// the holder's id in "existing_id". A stored document the broker cannot
// decode (a result document with NaN from a worker outside the contract)
// answers 502 invalid_document, its field in "field". A known path with a method it does not
// serve answers 405 method_not_allowed. When a bearer token is configured, every
// route except /healthz, /readyz and /v1/openapi.json requires
// "Authorization: Bearer <token>".
package httpapi
