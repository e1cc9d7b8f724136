// spool-client: a Spool producer and a native core-level worker for
// Node.js, on the official @nats-io packages, following docs/contract.md.
// Types are in index.d.ts.

import "./lib/nodeversion.js";
export { PRIORITIES, names, matchType } from "./lib/names.js";
export { output } from "./lib/output.js";
export { Producer, TaskFinishedError, TaskNotFoundError, UniqueConflictError, newID } from "./lib/producer.js";
export { Worker, permanent, retryAfter } from "./lib/worker.js";
