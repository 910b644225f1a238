// One graphile-worker process of benchmark 5 (bench/peers_graphile.py starts four).
//   node worker.mjs install            run graphile-worker's migrations, then exit
//   node worker.mjs tuned|defaults     run the pool with an empty "noop" task until SIGTERM
// The connection string comes from DATABASE_URL. Prints "ready" once the pool is
// settled into its idle wait: run() has returned, its LISTEN client is connected and
// its first (empty) fetch of jobs has returned (the local queue's, or a worker's
// without one); and {"done": N} (the jobs this process ran) when it stops. The LISTEN
// statement itself completes after its "success" event: the benchmark also waits for
// that session in pg_stat_activity.
import { EventEmitter } from "node:events";
import { run, runMigrations } from "graphile-worker";

// graphile-worker's Performance page (worker.graphile.org/docs/performance)
const TUNED = {
  concurrentJobs: 24,
  maxPoolSize: 25,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};

const mode = process.argv[2];
const connectionString = process.env.DATABASE_URL;
if (!connectionString || !["install", "tuned", "defaults"].includes(mode)) {
  console.error("usage: DATABASE_URL=... node worker.mjs install|tuned|defaults");
  process.exit(2);
}
const preset = { worker: { connectionString, ...(mode === "tuned" ? TUNED : {}) } };

if (mode === "install") {
  await runMigrations({ preset });
  process.exit(0);
}

const events = new EventEmitter();
const waiting = new Set(["run", "listen", "fetch"]);
const settled = (what) => {
  if (waiting.delete(what) && waiting.size === 0) console.log("ready");
};
events.on("pool:listen:success", () => settled("listen"));
events.on("localQueue:getJobs:complete", () => settled("fetch"));
events.on("worker:getJob:empty", () => settled("fetch"));

let done = 0;
const runner = await run({
  preset,
  events,
  noHandleSignals: true,
  taskList: {
    noop: async () => {
      done += 1;
    },
  },
});
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await runner.stop();
  console.log(JSON.stringify({ done }));
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
settled("run");
await runner.promise;
