// Pull requests for the free slots (docs/contract.md, "Working a task",
// step 1): each lane (one consumer) has at most one open request, and the
// open requests never ask for more tasks than there are free slots, so
// every task pulled starts at once. A lane known to have tasks (its last
// task said more are pending, or a refresh read its consumer's pending
// count) gets as many slots as it has tasks, the most urgent priority
// first; idle lanes long-poll for one task each, taken in turns when there
// are more lanes than free slots. Every second the lanes with no open
// request have their consumer read, for its pending count and its pause:
// a paused consumer is not pulled.

import { createInbox } from "@nats-io/transport-node";
import { PRIORITIES, ackMeta } from "./names.js";

const NS = 1000000;

export class Puller {
  /**
   * @param {import("@nats-io/transport-node").NatsConnection} nc
   * @param {{priority: string, name: string}[]} lanes most urgent first
   * @param {() => number} free the slots free now (not counting open requests)
   * @param {(lane: object, m: import("@nats-io/transport-node").Msg) => void} onTask
   * @param {(name: string) => Promise<{num_pending: number, paused?: boolean}>} info reads a consumer
   */
  constructor(nc, stream, lanes, free, onTask, info, log) {
    Object.assign(this, { nc, stream, free, onTask, info, log });
    this.lanes = lanes.map((l) => ({ ...l, open: null, pending: 0, paused: false, rank: PRIORITIES.indexOf(l.priority) }));
    this.refresher = setInterval(() => this.#refresh(), 1000);
    this.reserved = 0;
    this.turn = 0;
    this.seq = 0;
    this.stopped = false;
    this.open = new Map();
    this.inbox = createInbox();
    this.sub = nc.subscribe(`${this.inbox}.>`, { callback: (err, m) => err ? this.log(`pull inbox: ${err.message}`) : this.#receive(m) });
    this.drained = null;
  }

  /** reserved counts the slots the open requests may still fill. */
  get slotsReserved() {
    return this.reserved;
  }

  /** plan sends pull requests for the free slots; call it whenever a slot frees. */
  plan() {
    if (this.stopped) return;
    let free = this.free() - this.reserved;
    if (free <= 0) return;
    const idle = this.lanes.filter((l) => !l.open && !l.paused);
    const busy = idle.filter((l) => l.pending > 0).sort((a, b) => a.rank - b.rank);
    const rest = idle.filter((l) => l.pending === 0);
    const start = rest.length ? this.turn++ % rest.length : 0;
    const order = [...busy, ...rest.slice(start), ...rest.slice(0, start)];
    const expires = free >= order.length ? 1000 : 300;
    for (const lane of order) {
      if (free <= 0) break;
      const batch = Math.min(free, Math.max(1, lane.pending));
      free -= batch;
      this.#request(lane, batch, expires);
    }
  }

  #request(lane, batch, expiresMs) {
    const token = String(++this.seq);
    const req = { lane, batch, delivered: 0, token };
    req.timer = setTimeout(() => this.#end(req), expiresMs + 3000); // the server's 408 was lost
    lane.open = req;
    this.open.set(token, req);
    this.reserved += batch;
    this.nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${this.stream}.${lane.name}`, JSON.stringify({ batch, expires: expiresMs * NS }), { reply: `${this.inbox}.${token}` });
  }

  // receive takes what arrives on the inbox. A task keeps its own
  // subject, so it is matched to its request by the consumer its ack
  // subject names (a lane has one open request at most); a status comes
  // on the request's own reply subject.
  #receive(m) {
    if (m.reply?.startsWith("$JS.ACK.")) {
      const md = ackMeta(m.reply);
      const lane = this.lanes.find((l) => l.name === md.consumer) ?? this.lanes[0];
      const req = lane.open;
      lane.pending = md.pending;
      if (req) {
        req.delivered++;
        this.reserved--;
        if (req.delivered >= req.batch) this.#end(req);
      }
      // A task for a request given up on runs all the same.
      this.onTask(lane, m);
      return;
    }
    const req = this.open.get(m.subject.slice(this.inbox.length + 1));
    const code = m.headers?.code ?? 0;
    if (code === 100 || !req) return; // idle heartbeat, or a request already ended
    if (code !== 404 && code !== 408) this.log(`pull from ${req.lane.name}: ${code} ${m.headers?.description ?? ""}`);
    if (req.delivered === 0) req.lane.pending = 0;
    this.#end(req);
  }

  #end(req) {
    if (!this.open.delete(req.token)) return;
    clearTimeout(req.timer);
    this.reserved -= req.batch - req.delivered;
    req.lane.open = null;
    if (this.open.size === 0 && this.drained) this.drained();
    queueMicrotask(() => this.plan());
  }

  // refresh reads the consumers of the lanes with no open request.
  async #refresh() {
    if (this.refreshing || this.stopped) return;
    this.refreshing = true;
    for (const lane of this.lanes) {
      if (lane.open) continue;
      try {
        const ci = await this.info(lane.name);
        if (!lane.open) Object.assign(lane, { pending: ci.num_pending, paused: Boolean(ci.paused) });
      } catch (err) {
        this.log(`reading consumer ${lane.name}: ${err.message}`);
      }
    }
    this.refreshing = false;
    this.plan();
  }

  /** stop sends no more requests and resolves once the open ones ended. */
  async stop() {
    this.stopped = true;
    clearInterval(this.refresher);
    if (this.open.size) await new Promise((resolve) => (this.drained = resolve));
    this.sub.unsubscribe();
  }
}
