// Package workflow is the wire contract and the state machine of Spool's
// workflows: chains, groups with a callback, and DAGs of tasks, advanced
// by whoever finishes a step, with no coordinator process.
//
// A workflow is a Doc (the JSON document of docs/contract.md, version 1):
// named steps, each a task (type, payload, priority, retries, timeout)
// that runs once every step named in its After list is terminal. Doc.Validate
// rejects cycles, unknown or duplicate step names and documents over the
// size limit before anything is stored or enqueued.
//
// State lives in the workflows bucket (spool_workflows), one key per
// step and one for the workflow, every change a compare-and-set:
//
//	<id>.wf            Record: policy, state, which steps are done or failed,
//	                   how many inputs each waiting step still waits for
//	<id>.step.<name>   StepRecord: the step's definition and its state
//
// A step's task id is derived from the workflow id, the step name and the
// step's run (StepTaskID), and is also its Nats-Msg-Id, so enqueueing a
// step twice stores it once. When a step's task reaches a terminal state,
// the worker that settled it calls Store.Finish after the result is stored
// and before the task is acked: Finish marks the step's bit in the
// workflow record (idempotent: a bit set twice counts once), decrements the
// waiting count of each dependant in the same compare-and-set, and enqueues
// the dependants whose count reached zero. A crash anywhere in between
// leaves the task unacked; its redelivery finds the result stored, skips
// the handler and calls Finish again, which redoes only what is missing.
//
// The Go client (producer), the HTTP broker and any NATS client submit the
// same document: the first two call Store.Submit themselves; a NATS
// client publishes it as a task of the reserved type SubmitType, which
// every worker handles with Store.Submit.
package workflow
