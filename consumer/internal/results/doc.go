// Package results writes and reads Spool's result documents (the results
// bucket, key = task id) and releases unique keys (the unique bucket), for
// the worker and the DLQ router.
//
// A Store writes a document in one of three ways: Put waits for the
// bucket's acknowledgement; PutAsync does not wait (failures reach the
// JetStream context's async error handler); PutUnacked asks for no
// acknowledgement at all, for advisory states a later write supersedes. The
// worker's completion pipeline encodes documents itself (Encode) and
// publishes them to Subject(id). Dead records a dead-lettered task: its
// dead result document and the release of its unique key.
package results
