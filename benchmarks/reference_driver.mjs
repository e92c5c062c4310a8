// Drives a reference hub store (triflux hub/store.mjs + reflexion.mjs) for bench_store.py.
//
// Reads one JSON spec on stdin, prints one JSON line on stdout. The workloads mirror the
// ones in bench/workloads.py call for call (same agent names, topics, payloads, errors),
// so that the two stores do the same work. Nothing is preloaded here: bench_store.py
// (bench/background.py) writes the background rows into the file before this script
// opens it.
//
// Spec fields: mode ("init" | "workloads" | "hub"), hub_dir (the folder holding
// store.mjs), db (the database file), and per mode:
//   workloads: workloads (names, in running order), n (operations per workload)
//   hub: agents, seconds (simulated seconds at most), budget_s (wall seconds at most)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';

const AGENT_COUNT = 200;

const agent = (i) => `agent-${i % AGENT_COUNT}`;
const topics = (i) => ['t.a', `t.${i % 7}`];
const reflexionContext = (i) => ({ cli: 'codex', agent: `agent-${i % 5}` });
const learnError = (i) => `TypeError: cannot read x${i % 300} of undefined at /src/a.js:${i}:3`;
const lookupError = (i) => `TypeError: cannot read x${i % 300} of undefined at /lib/b.js:${i + 7}:9`;

function auditMessage(store, i) {
  const toTopic = i % 3 === 0;
  store.auditLog({
    type: 'event',
    from: agent(i),
    to: toTopic ? 'topic:t.a' : agent(i + 1),
    topic: toTopic ? 't.a' : `t.${i % 7}`,
    payload: { i, text: 'benchmark message' },
  });
}

function lifecycle(store, supervisor, worker, task) {
  const job = store.createAssign({ supervisor_agent: supervisor, worker_agent: worker, task });
  store.updateAssignStatus(job.job_id, 'running');
  store.updateAssignStatus(job.job_id, 'succeeded', { result: { ok: true } });
}

function workloads(store, reflexion) {
  return {
    register_agent: (i) => store.registerAgent({ agent_id: agent(i), cli: 'codex', topics: topics(i) }),
    heartbeat: (i) => store.refreshLease(agent(i)),
    audit_log: (i) => auditMessage(store, i),
    poll_for_agent: (i) => store.pollForAgent(agent(i)),
    assign_lifecycle: (i) => lifecycle(store, 'lead', agent(i), `t${i}`),
    reflexion_learn: (i) => reflexion.learnFromError(store, {
      error: learnError(i), solution: 'guard it', context: reflexionContext(i), success: i % 2 === 0,
    }),
    reflexion_lookup_ctx: (i) => reflexion.lookupSolution(store, lookupError(i), reflexionContext(i)),
    sweep_and_stats: () => { store.getHubStats(); store.getAuditStats(); },
  };
}

function runWorkloads(store, reflexion, spec) {
  const ops = workloads(store, reflexion);
  const rates = {};
  for (const name of spec.workloads) {
    const op = ops[name];
    if (!op) throw new Error(`unknown workload ${name}`);
    const started = performance.now();
    for (let i = 0; i < spec.n; i++) op(i);
    const elapsed = (performance.now() - started) / 1000;
    rates[name] = elapsed > 0 ? spec.n / elapsed : Infinity;
  }
  return { rates };
}

// The whole-hub mix (bench/whole_hub.py hub_second): per simulated second, agent a with
// phase p = t + a heartbeats when p % 10 == 0, polls when p is even and writes an audit
// message when it is odd, runs an assign lifecycle when p % 50 == 0, learns from an
// error when p % 100 == 0 and looks one up when p % 100 == 50. The hub reads its figures
// every second and sweeps stale agents every 5 seconds.
const hubAgent = (a) => `hub-${a}`;

function hubSecond(store, reflexion, t, agents, counter) {
  let ops = 0;
  for (let a = 0; a < agents; a++) {
    const p = t + a;
    const name = hubAgent(a);
    if (p % 10 === 0) { store.refreshLease(name); ops++; }
    if (p % 2 === 0) {
      store.pollForAgent(name); ops++;
    } else {
      const k = counter.messages++;
      const toTopic = k % 3 === 0;
      store.auditLog({
        type: 'event', from: name, to: toTopic ? 'topic:t.a' : hubAgent((a + 1) % agents),
        topic: toTopic ? 't.a' : `t.${a % 7}`, payload: { i: k, text: 'hub message' },
      });
      ops++;
    }
    if (p % 50 === 0) { lifecycle(store, 'hub-lead', name, `h${t}-${a}`); ops += 3; }
    if (p % 100 === 0) {
      const k = counter.errors++;
      reflexion.learnFromError(store, {
        error: learnError(k), solution: 'guard it', context: reflexionContext(k), success: k % 2 === 0,
      });
      ops++;
    }
    if (p % 100 === 50) {
      const k = counter.lookups++;
      reflexion.lookupSolution(store, lookupError(k), reflexionContext(k));
      ops++;
    }
  }
  store.getHubStats(); store.getAuditStats(); ops += 2;
  if (t % 5 === 0) { store.sweepStaleAgents(); ops++; }
  return ops;
}

function runHub(store, reflexion, spec) {
  for (let a = 0; a < spec.agents; a++) {
    store.registerAgent({ agent_id: hubAgent(a), cli: 'codex', topics: topics(a) });
  }
  const counter = { messages: 0, errors: 0, lookups: 0 };
  const budgetMs = spec.budget_s * 1000;
  let ops = 0;
  let t = 0;
  const started = performance.now();
  while (t < spec.seconds) {
    ops += hubSecond(store, reflexion, t, spec.agents, counter);
    t++;
    if (performance.now() - started >= budgetMs) break;
  }
  const wall = (performance.now() - started) / 1000;
  return {
    sim_seconds: t, agents: spec.agents, ops, wall_seconds: wall,
    agent_seconds_per_s: (spec.agents * t) / wall,
    rss_bytes: process.memoryUsage().rss,
  };
}

async function main() {
  const spec = JSON.parse(readFileSync(0, 'utf8'));
  const { createStore } = await import(pathToFileURL(join(spec.hub_dir, 'store.mjs')).href);
  const reflexion = await import(pathToFileURL(join(spec.hub_dir, 'reflexion.mjs')).href);
  const store = createStore(spec.db);
  try {
    let out;
    if (spec.mode === 'init') out = { ok: true };
    else if (spec.mode === 'workloads') out = runWorkloads(store, reflexion, spec);
    else if (spec.mode === 'hub') out = runHub(store, reflexion, spec);
    else throw new Error(`unknown mode ${spec.mode}`);
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } finally {
    store.close();
  }
}

main().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
