// Pull requests for the free slots (docs/contract.md, "Working a task",
// step 1): each lane (one consumer) has at most one open request, and the
// open requests never ask for more tasks than there are free slots, so
// every task pulled starts at once (docs/contract.md, "Pulling only what
// can start"). A lane known to have tasks (its last task said more are
// pending, or a refresh read its consumer's pending count) gets a no-wait
// pull for as many slots as it has tasks, the most urgent priority first;
// the slots left long-poll the other lanes for one task each: first those
// with tasks delivered but not acked here (back from a retry delay soon),
// the most urgent first, then the others in turns. Every second the lanes with no open request have their
// consumer read, for its pending count and its pause: a paused consumer is
// not pulled.

import { createInbox } from "@nats-io/transport-node";
import { PRIORITIES, ackMeta } from "./names.js";

const NS = 1000000;

export class Puller {
  /**
   * @param {import("@nats-io/transport-node").NatsConnection} nc
   * @param {{stream: string, priority: string, name: string}[]} lanes
   * @param {() => number} free the slots free now (not counting open requests)
   * @param {(lane: object, m: import("@nats-io/transport-node").Msg) => void} onTask
   * @param {(lane: {stream: string, name: string}) => Promise<{num_pending: number, paused?: boolean}>} info reads a consumer
   */
  constructor(nc, lanes, free, onTask, info, log) {
    Object.assign(this, { nc, free, onTask, info, log });
    // running counts the lane's tasks running here; the worker lowers it
    // as each attempt ends.
    this.lanes = lanes.map((l) => ({ ...l, open: null, pending: 0, paused: false, maybe: false, running: 0, rank: PRIORITIES.indexOf(l.priority) }));
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
    const idle = this.lanes.filter((l) => !l.open && !l.paused).sort((a, b) => a.rank - b.rank);
    // Consumers with work first, with no-wait pulls sized to their tasks;
    // the slots left long-poll the others, one task each.
    for (const lane of idle.filter((l) => l.pending > 0)) {
      if (free <= 0) return;
      const batch = Math.min(free, lane.pending);
      free -= batch;
      this.#request(lane, { batch, no_wait: true }, 5000);
    }
    // Lanes with tasks delivered and not acked here (in retry backoff,
    // say) long-poll first, then the rest in turns.
    const maybe = idle.filter((l) => l.pending === 0 && l.maybe);
    const rest = idle.filter((l) => l.pending === 0 && !l.maybe);
    const start = rest.length ? this.turn++ % rest.length : 0;
    for (const lane of [...maybe, ...rest.slice(start), ...rest.slice(0, start)]) {
      if (free <= 0) return;
      free -= 1;
      this.#request(lane, { batch: 1, expires: 1000 * NS }, 4000);
    }
  }

  // request sends one pull request, reserving its batch of slots; the
  // request is given up after giveUpMs if no status ends it.
  #request(lane, body, giveUpMs) {
    const token = String(++this.seq);
    const req = { lane, batch: body.batch, delivered: 0, token };
    req.timer = setTimeout(() => this.#end(req), giveUpMs);
    lane.open = req;
    this.open.set(token, req);
    this.reserved += body.batch;
    this.nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${lane.stream}.${lane.name}`, JSON.stringify(body), { reply: `${this.inbox}.${token}` });
  }

  // receive takes what arrives on the inbox. A task keeps its own
  // subject, so it is matched to its request by the consumer its ack
  // subject names (a lane has one open request at most); a status comes
  // on the request's own reply subject.
  #receive(m) {
    if (m.reply?.startsWith("$JS.ACK.")) {
      const md = ackMeta(m.reply);
      const lane = this.lanes.find((l) => l.name === md.consumer && l.stream === md.stream) ?? this.lanes[0];
      const req = lane.open;
      lane.pending = md.pending;
      lane.running++;
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
    if (code === 404 || req.delivered === 0) req.lane.pending = 0; // empty until the next reading
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
        const ci = await this.info(lane);
        if (!lane.open) Object.assign(lane, { pending: ci.num_pending, paused: Boolean(ci.paused), maybe: ci.num_ack_pending > lane.running });
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
