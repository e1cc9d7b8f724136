// The BullMQ side of spool-bench's peers scenario. It speaks the harness's
// consume-child protocol: it prints "start" when its measured window
// opens, then one JSON line with the figures, and exits.
//
//   node bench.mjs drain  --redis host:port --n N --fill F --conc C
//   node bench.mjs pickup --redis host:port --n N --conc C --rate R
//
// drain fills the queue with F jobs (at least N, not measured), then times
// a Worker of concurrency C with a no-op processor from its start until N
// jobs completed. pickup starts the Worker, then adds one job every 1/R s from a
// Queue in the same process; each job carries the time it was added, and
// the processor measures from it. BullMQ's defaults otherwise: completed
// jobs are kept, as Spool keeps its result documents.
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Queue, Worker } from 'bullmq';

const queueName = 'bench';
const fillChunk = 1000;

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    redis: { type: 'string' },
    n: { type: 'string' },
    fill: { type: 'string', default: '0' },
    conc: { type: 'string' },
    rate: { type: 'string', default: '200' },
  },
});
const mode = positionals[0];
const n = Number(values.n);
const fill = Math.max(n, Number(values.fill));
const conc = Number(values.conc);
const rate = Number(values.rate);
if (!['drain', 'pickup'].includes(mode) || !values.redis || !(n > 0) || !(conc > 0) || !(rate > 0)) {
  console.error('usage: node bench.mjs drain|pickup --redis host:port --n N --conc C [--fill F] [--rate R]');
  process.exit(2);
}
const [host, port] = values.redis.split(':');
const connection = { host, port: Number(port) };

// now is a clock in microseconds shared by the producer and the processor.
const now = () => (performance.timeOrigin + performance.now()) * 1000;

function quantile(sorted, q) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

async function main() {
  const queue = new Queue(queueName, { connection });
  await queue.waitUntilReady();
  if (mode === 'drain') {
    for (let i = 0; i < fill; i += fillChunk) {
      const jobs = [];
      for (let j = i; j < Math.min(fill, i + fillChunk); j++) {
        jobs.push({ name: 'bench', data: { n: 1 } });
      }
      await queue.addBulk(jobs);
    }
  }
  const samples = [];
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(queueName, async (job) => {
    if (mode === 'pickup') samples.push(now() - job.data.at);
  }, { connection, concurrency: conc, autorun: false });
  worker.on('completed', () => {
    done++;
    if (done === n) finish();
  });
  worker.on('error', (err) => console.error('bullmq worker:', err));
  await worker.waitUntilReady();

  console.log('start');
  const cpu0 = process.cpuUsage();
  const t0 = now();
  worker.run();
  if (mode === 'pickup') {
    // As Spool's pickup: let the worker start polling first.
    await new Promise((r) => setTimeout(r, 200));
    const gap = 1000 / rate;
    const first = performance.now();
    for (let i = 0; i < n; i++) {
      const due = first + i * gap - performance.now();
      if (due > 0) await new Promise((r) => setTimeout(r, due));
      await queue.add('bench', { at: now() });
    }
  }
  await finished;
  const seconds = (now() - t0) / 1e6;
  const cpu = process.cpuUsage(cpu0);
  const sorted = samples.sort((a, b) => a - b);
  console.log(JSON.stringify({
    tasks: done,
    seconds,
    cpu_us: cpu.user + cpu.system,
    P50us: quantile(sorted, 0.5),
    P99us: quantile(sorted, 0.99),
    MaxUs: sorted.length ? sorted[sorted.length - 1] : 0,
  }));
  await worker.close();
  await queue.close();
}

main().catch((err) => {
  console.error('bullmq bench:', err);
  process.exit(1);
});
