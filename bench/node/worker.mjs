// One graphile-worker process of benchmark 5 (bench/peers_graphile.py starts four).
//   node worker.mjs install            run graphile-worker's migrations, then exit
//   node worker.mjs tuned|defaults     run the pool with an empty "noop" task until SIGTERM
// The connection string comes from DATABASE_URL. Prints "ready" once the pool is
// listening, and {"done": N} (the jobs this process ran) when it stops.
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

let done = 0;
const runner = await run({
  preset,
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
console.log("ready");
await runner.promise;
