#!/usr/bin/env node
// Many replicas, real failures, nothing lost (bench/faults/README.md).
//
// Starts, all as real processes on loopback: our own PostgreSQL instance (initdb into the
// scratch folder; never the machine's shared cluster), our own Garage, two kiln-api replicas
// behind nginx (API and content origins), and three kiln-worker processes. Under a steady load
// of uploads (through nginx, retried with the same Idempotency-Key as a CI job would) and
// beacons, it runs rounds of faults: SIGKILL a random worker (one with a job running where
// there is one), SIGKILL an API replica in the middle of an upload it is receiving (the full
// profile also just after the body, and between recording a build and queueing it), restart
// PostgreSQL once (immediate shutdown: crash recovery), stop Garage for ten seconds (the full
// profile also kills it for ten seconds). Then it measures the worker scaling curve
// (builds/minute with 1, 2, 3 workers on the same saturated queue) and checks:
//
// - every acknowledged upload (202, or 200 for the build an earlier cut-off attempt made) is
//   published exactly once (one build per package, one manifest, at most one publish
//   release), with a manifest and every object byte-identical to `kiln-worker process` on the
//   same package (fetched back through nginx from /cdn);
// - every upload cut off mid-body got an error (none hung) and left no build; no build that is
//   not fully published is live (every build a release names is published, all its objects
//   served);
// - per game, releases 1, 2, 3, … with no gap or duplicate, a publish never replaced a build
//   uploaded after it, a re-sign only re-signed what was live, the live build is the newest
//   published one and both replicas serve its exact bytes;
// - every beacon answered 202 is stored (answered 503: refused, not counted as lost);
// - no process's memory grew beyond the bound printed with the table.
//
// Prints the table and exits 1 when any check failed, 2 when the harness could not run.
// Usage: node bench/faults/run.mjs [--quick] [--bin-dir DIR] [--keep] [--seed N] (--help)
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Api, Garage, Nginx, Postgres, Worker, kilnEnv } from './lib/cluster.mjs';
import { describe, json, request } from './lib/http.mjs';
import { cpuTicks, exec, machineTicks, rows, run, runAsync, sleep, stopAllNow, until } from './lib/procs.mjs';
import { zipEntries } from '../load/lib/zip.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const CLK_TCK = Number(run('getconf', ['CLK_TCK']).stdout.trim()) || 100;

// ---------------------------------------------------------------------------------------
// Profiles. Every fault kind but garage-kill runs at least once in both; the full one runs more rounds and
// longer scaling windows.

const PROFILES = {
  quick: {
    // One round: each kind but garage-kill once, a second worker kill.
    rounds: [['worker', 'api', 'postgres', 'worker', 'garage-stop', 'api-commit']],
    uploadIntervalMs: 1200,
    beaconIntervalMs: 150,
    foxEvery: 20,
    gapMs: 3000,
    stagePauseMs: 150,
    scalingWindowMs: 8_000,
    scalingDepth: 6,
    warmupBuilds: 2,
    // The memory check applies to instances (not killed on purpose) that lived this long.
    rssMinLifeMs: 30_000,
  },
  full: {
    rounds: [
      ['worker', 'api'],
      ['worker', 'postgres', 'api'],
      ['worker', 'garage-stop', 'api'],
      ['worker', 'api'],
      ['worker', 'garage-kill', 'api'],
      ['worker', 'api', 'api-commit'],
    ],
    uploadIntervalMs: 900,
    beaconIntervalMs: 100,
    foxEvery: 8,
    gapMs: 8000,
    stagePauseMs: 150,
    scalingWindowMs: 45_000,
    scalingDepth: 10,
    warmupBuilds: 4,
    rssMinLifeMs: 120_000,
  },
};

const FAULT_NAMES = {
  worker: 'SIGKILL a worker',
  api: 'SIGKILL an API replica mid-upload',
  postgres: 'PostgreSQL restart (immediate shutdown)',
  'garage-stop': 'Garage stopped 10 s (SIGSTOP … SIGCONT)',
  'garage-kill': 'Garage killed, restarted after 10 s (SIGKILL)',
  'api-commit': 'SIGKILL an API replica between recording a build and queueing it',
};

// The memory bound: an instance's RSS at its end may exceed its baseline (the highest RSS
// in the second quarter of its life, once warm) by at most this share plus this many bytes.
const RSS_GROWTH_SHARE = 0.25;
const RSS_GROWTH_BYTES = 48 << 20;

// ---------------------------------------------------------------------------------------
// Arguments.

function usage(code) {
  console.log(`usage: node bench/faults/run.mjs [--quick] [--bin-dir DIR] [--keep] [--seed N]
                                  [--pg-down-ms N] [--pg-restart immediate|fast] [--faults LIST]

  --quick         short profile (about 3 minutes): every fault kind once, short scaling windows
  --bin-dir DIR   where kiln-api and kiln-worker are (default: $KILN_BIN_DIR, else the newer
                  complete pair of target/release and target/debug)
  --keep          keep the scratch folder (logs of every process, configs, packages)
  --seed N        package contents and choices (printed; replays the same choices)
  --pg-down-ms N  how long PostgreSQL stays down in its restart (default 3000)
  --pg-restart M  immediate (default: a crash, then crash recovery) or fast (pg_ctl's default)
  --faults LIST   instead of the profile's rounds, one round of these (comma-separated):
                  worker, api, api-commit, postgres, garage-stop, garage-kill`);
  process.exit(code);
}

const argv = process.argv.slice(2);
const opts = { quick: false, binDir: process.env.KILN_BIN_DIR || '', keep: false, seed: null, pgDownMs: 3000, pgRestart: 'immediate' };
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--quick') opts.quick = true;
  else if (a === '--full') opts.quick = false;
  else if (a === '--keep') opts.keep = true;
  else if (a === '--bin-dir') opts.binDir = argv[++i];
  else if (a === '--seed') opts.seed = Number(argv[++i]);
  else if (a === '--pg-down-ms') opts.pgDownMs = Number(argv[++i]);
  else if (a === '--pg-restart') opts.pgRestart = argv[++i];
  else if (a === '--faults') opts.faults = argv[++i].split(',').filter(Boolean);
  else if (a === '-h' || a === '--help') usage(0);
  else {
    console.error(`unknown argument ${a}`);
    usage(2);
  }
}
const P = { ...(opts.quick ? PROFILES.quick : PROFILES.full) };
if (!['immediate', 'fast'].includes(opts.pgRestart)) {
  console.error(`--pg-restart: immediate or fast, not ${opts.pgRestart}`);
  usage(2);
}
if (opts.faults) {
  for (const f of opts.faults) {
    if (!FAULT_NAMES[f]) {
      console.error(`unknown fault ${f}`);
      usage(2);
    }
  }
  P.rounds = [opts.faults];
}
const profileName = `${opts.quick ? 'quick' : 'full'}${opts.faults ? ` (faults: ${opts.faults.join(', ')})` : ''}`;

function findBins() {
  const pair = (dir) => ({ dir, api: join(dir, 'kiln-api'), worker: join(dir, 'kiln-worker') });
  if (opts.binDir) {
    const b = pair(resolve(opts.binDir));
    for (const f of [b.api, b.worker]) if (!existsSync(f)) throw new Error(`--bin-dir: no ${f}`);
    return b;
  }
  const target = join(repo, 'target');
  const complete = ['release', 'debug']
    .map((p) => pair(join(target, p)))
    .filter((b) => existsSync(b.api) && existsSync(b.worker))
    .map((b) => ({ ...b, built: Math.min(statSync(b.api).mtimeMs, statSync(b.worker).mtimeMs) }));
  if (!complete.length) throw new Error(`no kiln-api and kiln-worker under ${target}/{release,debug}: cargo build --bin kiln-api --bin kiln-worker (or pass --bin-dir)`);
  complete.sort((a, b) => b.built - a.built);
  return complete[0];
}

// ---------------------------------------------------------------------------------------
// Small helpers.

let seed = (opts.seed ?? randomBytes(4).readUInt32LE(0)) >>> 0 || 1;
const initialSeed = seed;
function rand() {
  seed ^= seed << 13;
  seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  seed >>>= 0;
  return seed / 2 ** 32;
}
const pick = (list) => list[Math.floor(rand() * list.length)];

const t0 = Date.now();
const stamp = () => `[${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s]`;
const log = (...a) => console.log(stamp(), ...a);
const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const mib = (b) => `${(b / 1048576).toFixed(1)}`;
const secs = (ms) => `${(ms / 1000).toFixed(1)} s`;

function quantile(sorted, q) {
  if (!sorted.length) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

/** What went wrong, by check; the exit status is 1 when any. */
const failures = [];
function fail(check, message) {
  failures.push({ check, message });
  log(`FAIL [${check}] ${message}`);
}

// ---------------------------------------------------------------------------------------
// The cluster.

let bins;
try {
  bins = findBins();
} catch (e) {
  console.error(`kiln faults: ${e.message}`);
  process.exit(2);
}
for (const tool of ['psql']) {
  if (run('sh', ['-c', `command -v ${tool}`]).status !== 0) {
    console.error(`kiln faults: ${tool} is needed`);
    process.exit(2);
  }
}

const scratch = mkdtempSync(join(tmpdir(), 'kiln-faults-'));
// PostgreSQL (as the `postgres` user) and nginx's workers (unprivileged) must get through it.
chmodSync(scratch, 0o711);
const runTag = randomBytes(4).toString('hex');
const cluster = {
  dir: scratch,
  bins,
  admin: `faults-admin-${randomBytes(12).toString('hex')}`,
  heartbeatSecs: 2,
  // Short-lived releases: workers re-sign live ones during the run (re-sign races too).
  manifestTtlSecs: 30,
  resignIntervalSecs: 2,
  procs: [],
  track(proc) {
    this.procs.push(proc);
  },
};
cluster.signingKey = join(scratch, 'keys', 'signing.key');
cluster.rootKey = join(scratch, 'keys', 'root.key');
cluster.telemetrySecret = join(scratch, 'keys', 'telemetry.key');
mkdirSync(join(scratch, 'keys'), { recursive: true });
mkdirSync(join(scratch, 'packages'), { recursive: true });

const pg = new Postgres(join(scratch, 'postgres'));
const garage = new Garage(join(scratch, 'garage'));
const nginx = new Nginx(join(scratch, 'nginx'));
cluster.garage = garage;
cluster.nginx = nginx;
const apis = [new Api(cluster, 0), new Api(cluster, 1)];
const workers = []; // slot → Worker (the current one in that slot)
const allWorkers = [];
const WORKER_SLOTS = 3;

let stopping = false;
async function teardown() {
  stopping = true;
  const stops = [];
  for (const w of allWorkers) stops.push(w.proc?.stop(10_000));
  for (const a of apis) stops.push(a.proc?.stop(10_000));
  await Promise.allSettled(stops);
  await Promise.allSettled([nginx.stop(), garage.stop()]);
  await pg.stop().catch(() => {});
  stopAllNow();
  if (opts.keep) console.log(`scratch kept: ${scratch}`);
  else if (failures.length) {
    // Keep what explains a failure (every process's log, the configs), not the bulk.
    for (const bulk of ['packages', 'reference', 'reference-data', 'postgres/data', 'garage/data', 'garage/meta']) rmSync(join(scratch, bulk), { recursive: true, force: true });
    for (const w of allWorkers) rmSync(join(w.dir, 'work'), { recursive: true, force: true });
    console.log(`logs kept: ${scratch}`);
  } else rmSync(scratch, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    console.error(`\n${sig}: stopping everything`);
    opts.keep = true;
    teardown().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------
// Packages: each upload is a distinct build (its own page, script and a random asset); some
// carry the sample game's animated Fox model, which the geometry and animation stages work on.

const FOX = join(repo, 'examples/sample-game/assets/Fox.glb');
const foxBytes = existsSync(FOX) ? readFileSync(FOX) : null;
const GAMES = ['alpha', 'bravo', 'charlie'].map((g) => `faults-${g}`);
// A game that gets a build only now and then: its live release ages past half its lifetime
// between builds, so workers re-sign it (and race each other doing so) during the faults.
const QUIET_GAME = 'faults-quiet';
const QUIET_EVERY = 15;
const packages = []; // every package offered, in order
let packageCount = 0;

const WORDS = ['frame', 'sprite', 'update', 'render', 'vector', 'matrix', 'player', 'enemy', 'score', 'level', 'input', 'audio', 'texture', 'shader', 'buffer', 'tween'];
function generatedScript(size) {
  const out = [];
  let length = 0;
  while (length < size) {
    const a = WORDS[Math.floor(rand() * WORDS.length)];
    const b = WORDS[Math.floor(rand() * WORDS.length)];
    const line = `export function ${a}${Math.floor(rand() * 4096)}(x, y) { return x.${b} * ${Math.floor(rand() * 977)} + y.${a}; }\n`;
    out.push(line);
    length += line.length;
  }
  return out.join('');
}

function makePackage(phase) {
  const n = packageCount++;
  const game = n % QUIET_EVERY === QUIET_EVERY - 1 ? QUIET_GAME : GAMES[n % GAMES.length];
  // The scaling windows get one shape of package only, so each window's work is the same.
  const fox = phase === 'fault' && foxBytes && P.foxEvery > 0 && n % P.foxEvery === P.foxEvery - 1;
  const noise = Buffer.alloc(48 * 1024);
  for (let i = 0; i < noise.length; i += 4) noise.writeUInt32LE((rand() * 2 ** 32) >>> 0, i);
  const entries = [
    ['index.html', `<!doctype html>\n<html><head><meta charset="utf-8"><title>${game} ${n}</title>\n<link rel="stylesheet" href="style.css">\n<script type="module" src="app.js"></script></head>\n<body><h1>build ${runTag}-${n}</h1></body></html>\n`],
    ['app.js', `// ${game} build ${runTag}-${n}\nexport const build = ${JSON.stringify(`${runTag}-${n}`)};\n${'console.log("frame", build);\n'.repeat(40)}`],
    ['style.css', `body { margin: 0; font: 16px sans-serif; } /* ${n} */\n`.repeat(20)],
    ['assets/noise.bin', noise],
    ['data/level.json', JSON.stringify({ build: n, tiles: Array.from({ length: 64 }, (_, i) => (i * 7 + n) % 13) })],
  ];
  if (fox) entries.push(['assets/Fox.glb', foxBytes]);
  // Scaling packages carry a 150 KB script: compressing it is most of their build's work.
  if (phase === 'scaling') entries.push(['lib/engine.js', generatedScript(150 * 1024)]);
  const body = zipEntries(entries);
  const file = join(scratch, 'packages', `${n}.zip`);
  writeFileSync(file, body);
  const pkg = {
    n,
    game,
    version: `1.${n}.0`,
    key: `faults-${runTag}-${n}`,
    fox: Boolean(fox),
    body,
    sha: sha256(body),
    file,
    phase,
    attempts: [],
    acked: null, // {status, build_id, at}
    victim: false,
  };
  packages.push(pkg);
  return pkg;
}

// ---------------------------------------------------------------------------------------
// The load: uploads offered at a steady rate, each retried like CI would; beacons.

let token = null;
const inFlight = new Set();
const tally = { attempts: 0, errors: {}, retriedThenAcked: 0, hung: 0 };

function countError(kind) {
  tally.errors[kind] = (tally.errors[kind] || 0) + 1;
}

function uploadHeaders(pkg, extra = {}) {
  return {
    authorization: `Bearer ${token}`,
    'content-type': 'application/zip',
    'idempotency-key': pkg.key,
    ...extra,
  };
}

/** One upload attempt through nginx, its body in `chunks` writes `gapMs` apart. */
async function attempt(pkg, { chunks = 4, gapMs = 60, headers = {}, onChunk } = {}) {
  const at = Date.now();
  tally.attempts++;
  const res = await request({
    port: nginx.port,
    method: 'POST',
    path: `/v1/games/${pkg.game}/builds?version=${pkg.version}`,
    headers: uploadHeaders(pkg, headers),
    body: pkg.body,
    chunks,
    gapMs,
    onChunk,
    timeoutMs: 180_000,
  });
  const record = {
    at,
    ms: Date.now() - at,
    status: res.status ?? null,
    code: res.error ? res.code : null,
    what: describe(res).slice(0, 300),
    upstream: res.headers?.['x-kiln-upstream'] ?? null,
    answer: res.error ? null : json(res),
  };
  pkg.attempts.push(record);
  if (record.code === 'TIMEOUT') tally.hung++;
  return record;
}

/** Offers a package until it is acknowledged (202/200) or refused for good. */
async function offer(pkg, { maxAttempts = 10 } = {}) {
  for (let a = 1; a <= maxAttempts; a++) {
    const r = await attempt(pkg);
    if (r.status === 202 || r.status === 200) {
      if (!r.answer?.build_id) {
        fail('upload answers', `package ${pkg.n}: ${r.status} without a build_id: ${r.what}`);
        return;
      }
      if (r.status === 200 && pkg.attempts.length === 1) fail('upload answers', `package ${pkg.n}: a first upload answered 200 (existing): ${r.what}`);
      pkg.acked = { status: r.status, build_id: r.answer.build_id, at: r.at };
      if (pkg.attempts.length > 1) tally.retriedThenAcked++;
      return;
    }
    const kind = r.status ? `HTTP ${r.status}` : r.code;
    countError(kind);
    // A client error other than these is the harness's own mistake: no retry helps.
    if (r.status && r.status >= 400 && r.status < 500 && ![408, 429].includes(r.status)) {
      fail('upload answers', `package ${pkg.n}: ${r.what}`);
      return;
    }
    if (stopping) return;
    await sleep(Math.min(8000, 400 * 2 ** (a - 1)));
  }
  pkg.refused = true;
}

function startUploads(phase) {
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      const next = Date.now() + P.uploadIntervalMs;
      if (inFlight.size < 8) {
        const pkg = makePackage(phase);
        const p = offer(pkg).finally(() => inFlight.delete(p));
        inFlight.add(p);
      }
      await sleep(Math.max(0, next - Date.now()));
    }
  })();
  return async () => {
    stop = true;
    await loop;
    await Promise.allSettled([...inFlight]);
  };
}

const beacons = []; // {n, events, status, upstream, at, assets}
const BEACON_SOURCES = 24; // 127.0.0.2 … : distinct players as the proxy sees them
function startBeacons() {
  let stop = false;
  const pending = new Set();
  let n = 0;
  const loop = (async () => {
    while (!stop) {
      const next = Date.now() + P.beaconIntervalMs;
      const b = { n: n++, at: Date.now(), assets: [] };
      const count = 1 + (b.n % 3);
      const events = [];
      for (let i = 0; i < count; i++) {
        const asset = `fault/${runTag}/${b.n}-${i}.glb`;
        b.assets.push(asset);
        events.push({
          type: 'decode',
          game: GAMES[b.n % GAMES.length],
          asset,
          variant: i % 2 ? 'quantized' : 'meshopt',
          decoder: i % 2 ? 'none' : 'wasm',
          bytes: 1000 + b.n,
          ms: 5 + (b.n % 50) + 0.5,
          device: { os: 'Android', os_version: '14', model: 'Pixel 8', memory: 8, cores: 8, runtime: 'chrome' },
        });
      }
      beacons.push(b);
      const p = request({
        port: nginx.contentPort,
        method: 'POST',
        path: '/v1/telemetry',
        headers: { 'content-type': 'text/plain' },
        body: Buffer.from(JSON.stringify({ events })),
        localAddress: `127.0.0.${2 + (b.n % BEACON_SOURCES)}`,
        timeoutMs: 60_000,
      }).then((res) => {
        b.status = res.status ?? null;
        b.code = res.error ? res.code : null;
        b.upstream = res.headers?.['x-kiln-upstream'] ?? null;
        b.doneAt = Date.now();
        const body = json(res);
        if (b.status === 202 && (body?.accepted !== count || body?.rejected !== 0)) {
          fail('beacon answers', `beacon ${b.n}: 202 but accepted ${body?.accepted} / rejected ${body?.rejected} of ${count}: ${describe(res)}`);
        } else if (b.status && ![202, 429, 503, 502, 504].includes(b.status)) {
          fail('beacon answers', `beacon ${b.n}: ${describe(res)}`);
        }
      });
      pending.add(p);
      p.finally(() => pending.delete(p));
      await sleep(Math.max(0, next - Date.now()));
    }
  })();
  return async () => {
    stop = true;
    await loop;
    await Promise.allSettled([...pending]);
  };
}

// ---------------------------------------------------------------------------------------
// Watching the database: build states and publication times, polled (errors while the
// database is down are expected and skipped).

const builds = new Map(); // build id → {status, published_at}
async function pollBuilds() {
  const list = await rows(dbUrl, `SELECT b.id, b.status, m.created_at AS published_at FROM builds b LEFT JOIN manifests m ON m.build_id = b.id`);
  for (const r of list) builds.set(r.id, r);
  return list;
}
let dbUrl;

function startWatcher() {
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      await pollBuilds().catch(() => {});
      await sleep(500);
    }
  })();
  return async () => {
    stop = true;
    await loop;
  };
}

function samplerStart() {
  const timer = setInterval(() => {
    for (const p of cluster.procs) p.sample();
  }, 1000);
  return () => clearInterval(timer);
}

/**
 * Waits until `pkg`s acknowledged builds are all published or failed: at most `deadlineMs`,
 * and no longer than `stallMs` without any of them finishing (a build nothing works on any
 * more is not going to finish; the checks then say which and why).
 */
async function drain(what, pkgs, deadlineMs, stallMs = 90_000) {
  let open = Infinity;
  let changed = Date.now();
  await until(what, async () => {
    await pollBuilds();
    const left = pkgs.filter((p) => p.acked && !['published', 'failed'].includes(builds.get(p.acked.build_id)?.status));
    if (left.length < open) {
      open = left.length;
      changed = Date.now();
    } else if (Date.now() - changed > stallMs) {
      throw Object.assign(new Error(`${left.length} build(s) did not move for ${secs(stallMs)}: ${left.slice(0, 5).map((p) => `${p.acked.build_id} ${builds.get(p.acked.build_id)?.status}`).join(', ')}`), { fatal: true });
    }
    return left.length === 0;
  }, { deadlineMs, intervalMs: 500 });
}

// ---------------------------------------------------------------------------------------
// Faults.

const pgStops = []; // when PostgreSQL was told to stop
const kills = { worker: 0, workerMidJob: 0, api: 0, apiVictimCut: 0, apiAfterBody: 0, apiCommit: 0, postgres: 0, 'garage-stop': 0, 'garage-kill': 0 };
const faultLog = []; // {kind, detail, startedAt, endedAt, recoveredAt}

async function startWorker(slot, { stagePauseMs, concurrency }) {
  const w = new Worker(cluster, `${slot}.${allWorkers.filter((x) => x.slot === slot).length}`, { stagePauseMs, concurrency });
  w.slot = slot;
  w.role = `worker-${slot}`;
  allWorkers.push(w);
  workers[slot] = w;
  await w.start();
  w.proc.role = `worker-${slot}`;
  return w;
}

async function killWorker() {
  // A worker with a job running, where there is one (apalis names its worker after the pid).
  let running = [];
  try {
    running = await rows(dbUrl, `SELECT lock_by FROM apalis.jobs WHERE status IN ('Queued', 'Running') AND lock_by IS NOT NULL`);
  } catch {
    /* no queue table yet, or the database is down: any worker */
  }
  const busy = workers.filter((w) => w?.proc.running && running.some((r) => r.lock_by.startsWith(`kiln-worker-${w.proc.pid}-`)));
  const victim = busy.length ? pick(busy) : pick(workers.filter((w) => w?.proc.running));
  const midJob = busy.includes(victim);
  log(`SIGKILL ${victim.role} (pid ${victim.proc.pid}${midJob ? ', a job running' : ', idle'})`);
  victim.proc.killedOnPurpose = true;
  await victim.proc.kill();
  kills.worker++;
  if (midJob) kills.workerMidJob++;
  await sleep(1000);
  await startWorker(victim.slot, { stagePauseMs: P.stagePauseMs, concurrency: 1 });
  return `${victim.role}${midJob ? ' (mid-job)' : ' (idle)'}`;
}

let apiTurn = 1;
let apiKillCount = 0;
/**
 * SIGKILL a replica while it receives an upload: the upload is pinned to it (X-Kiln-Replica)
 * and sent in 20 writes 150 ms apart.
 *
 * - `mid-body`: once the replica counts upload bytes again (after the 4th write), it is
 *   killed; the upload must get an error, and it is not retried, so it must leave no build.
 * - `after-body` (the full profile, every other kill): killed 0-80 ms after the last write,
 *   while it stores, records and queues the build or answers; the client then retries with
 *   the same Idempotency-Key as CI would, and whatever the first try left (nothing, or a
 *   build) must end as one published build.
 */
async function killApiMidUpload() {
  const api = apis[apiTurn];
  apiTurn = (apiTurn + 1) % apis.length;
  const mode = !opts.quick && apiKillCount++ % 2 === 1 ? 'after-body' : 'mid-body';
  const pkg = makePackage('fault');
  pkg.victim = mode;
  const before = await api.uploadBytes();
  let killedAt = null;
  let killing = null;
  let received = 0;
  const result = attempt(pkg, {
    chunks: 20,
    gapMs: mode === 'mid-body' ? 150 : 40,
    headers: { 'x-kiln-replica': String(api.index) },
    onChunk: async (n) => {
      if (killing) return;
      if (mode === 'after-body') {
        if (n < 19) return;
        // Not awaited: the answer may come before the kill or not, as it happens.
        const delay = Math.floor(rand() * 80);
        killing = (async () => {
          await sleep(delay);
          killedAt = Date.now();
          log(`SIGKILL ${api.role} (pid ${api.proc.pid}) ${delay} ms after the last byte of upload ${pkg.n}`);
          await api.kill();
        })();
        return;
      }
      if (n < 3) return;
      const now = await api.uploadBytes();
      if (killing || now === null || before === null || now <= before) return;
      received = now - before;
      killedAt = Date.now();
      log(`SIGKILL ${api.role} (pid ${api.proc.pid}) in the middle of upload ${pkg.n} (${n + 1} of its 20 writes sent; the replica's upload counter up ${received} bytes since it began)`);
      killing = api.kill();
      await killing;
    },
  });
  const r = await result;
  await killing;
  kills.api++;
  if (mode === 'after-body') kills.apiAfterBody++;
  if (!killedAt) {
    fail('fault injection', `${api.role}: the pinned upload ${pkg.n} finished before the replica counted its bytes (${r.what})`);
    if (api.proc.running) await api.kill();
  } else if (mode === 'mid-body' && (r.status === 202 || r.status === 200)) {
    fail('cut-off uploads', `upload ${pkg.n} was cut off by killing ${api.role} but was answered ${r.what}`);
  } else if (r.status === 202 || r.status === 200) {
    pkg.acked = { status: r.status, build_id: r.answer?.build_id, at: r.at };
    log(`  upload ${pkg.n} was answered before the kill: ${r.status}`);
  } else {
    if (mode === 'mid-body') kills.apiVictimCut++;
    countError(r.status ? `HTTP ${r.status}` : r.code);
    log(`  upload ${pkg.n} cut off: ${r.what.split('\n')[0]}`);
  }
  await sleep(1000);
  await api.start();
  if (mode === 'after-body' && !pkg.acked) {
    await offer(pkg);
    log(`  upload ${pkg.n} retried: ${pkg.acked ? `${pkg.acked.status}, build ${pkg.acked.build_id}` : 'never acknowledged'}`);
  }
  return `${api.role}, upload ${pkg.n} cut off ${mode}`;
}

/**
 * SIGKILL a replica in the one gap an upload has between two writes: its build row is
 * committed, its queue job not yet inserted (api/src/routes/uploads.rs: `insert_build`, then
 * `kiln_jobs::enqueue`). To land there every time rather than by luck, a trigger on the queue's
 * table (in this run's own database) holds the insert of that one upload's job for 8 s and
 * then fails it; the replica is killed while it waits. The client then retries with the same
 * Idempotency-Key, as CI would: the answer names the build, which must still get published.
 */
async function killApiBeforeQueue() {
  const api = apis[apiTurn];
  apiTurn = (apiTurn + 1) % apis.length;
  const pkg = makePackage('fault');
  pkg.victim = 'before-queue';
  await exec(dbUrl, `CREATE TABLE IF NOT EXISTS public.kiln_faults_hold (idempotency_key TEXT PRIMARY KEY);
    CREATE OR REPLACE FUNCTION public.kiln_faults_hold_job() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM public.kiln_faults_hold h JOIN public.builds b ON b.idempotency_key = h.idempotency_key
                 WHERE position(b.id IN convert_from(NEW.job, 'UTF8')) > 0) THEN
        PERFORM pg_sleep(8);
        RAISE EXCEPTION 'kiln faults: this job was held until its replica was killed';
      END IF;
      RETURN NEW;
    END $$;
    DROP TRIGGER IF EXISTS kiln_faults_hold_job ON apalis.jobs;
    CREATE TRIGGER kiln_faults_hold_job BEFORE INSERT ON apalis.jobs FOR EACH ROW EXECUTE FUNCTION public.kiln_faults_hold_job();
    INSERT INTO public.kiln_faults_hold VALUES ('${pkg.key}');`);
  const result = attempt(pkg, { headers: { 'x-kiln-replica': String(api.index) } });
  let recorded = null;
  try {
    recorded = await until(`upload ${pkg.n} recorded`, async () => (await rows(dbUrl, `SELECT id FROM builds WHERE idempotency_key = '${pkg.key}'`))[0], { deadlineMs: 60_000, intervalMs: 50 });
  } catch (e) {
    fail('fault injection', e.message);
  }
  log(`SIGKILL ${api.role} (pid ${api.proc.pid}): build ${recorded?.id} of upload ${pkg.n} recorded, its job not queued yet`);
  await api.kill();
  kills.apiCommit++;
  const r = await result;
  await exec(dbUrl, `DELETE FROM public.kiln_faults_hold`);
  if (r.status === 202 || r.status === 200) fail('fault injection', `upload ${pkg.n} was answered (${r.what}) although its job insert was held`);
  else countError(r.status ? `HTTP ${r.status}` : r.code);
  log(`  upload ${pkg.n}: ${r.what.split('\n')[0]}`);
  await sleep(1000);
  await api.start();
  await offer(pkg);
  log(`  upload ${pkg.n} retried: ${pkg.acked ? `${pkg.acked.status}, build ${pkg.acked.build_id} (${pkg.attempts[pkg.attempts.length - 1].answer?.status})` : 'never acknowledged'}`);
  return `${api.role}, build recorded, not queued`;
}

async function fault(kind) {
  const startedAt = Date.now();
  let detail = '';
  if (kind === 'worker') detail = await killWorker();
  else if (kind === 'api') detail = await killApiMidUpload();
  else if (kind === 'api-commit') detail = await killApiBeforeQueue();
  else if (kind === 'postgres') {
    log(`PostgreSQL: ${opts.pgRestart} shutdown`);
    await pg.restart(opts.pgDownMs, opts.pgRestart);
    pgStops.push(pg.signalledAt);
    kills.postgres++;
    detail = `${opts.pgRestart} shutdown`;
    log('PostgreSQL: back');
  } else if (kind === 'garage-stop') {
    log('Garage: SIGSTOP for 10 s');
    await garage.freeze(10_000);
    kills['garage-stop']++;
    detail = 'SIGSTOP 10 s';
    log('Garage: SIGCONT');
  } else if (kind === 'garage-kill') {
    log('Garage: SIGKILL, restart in 10 s');
    garage.proc.killedOnPurpose = true;
    await garage.killFor(10_000);
    garage.proc.role = 'garage';
    cluster.track(garage.proc);
    kills['garage-kill']++;
    detail = 'SIGKILL, 10 s down';
    log('Garage: restarted');
  }
  const endedAt = Date.now();
  const entry = { kind, detail, startedAt, endedAt, recoveredAt: null };
  faultLog.push(entry);
  // Recovered once a build is published after the fault, end to end (queue, database,
  // store) working again.
  try {
    const first = await until(`publishing again after "${FAULT_NAMES[kind]}"`, async () => {
      await pollBuilds();
      const after = [...builds.values()].map((b) => Date.parse(b.published_at ?? '')).filter((t) => t > endedAt);
      return after.length ? Math.min(...after) : null;
    }, { deadlineMs: 240_000, intervalMs: 250 });
    entry.recoveredAt = first;
    log(`  recovered: a build published ${secs(first - endedAt)} after the fault`);
  } catch (e) {
    fail('recovery', e.message);
  }
}

// ---------------------------------------------------------------------------------------
// Checks.

const results = {};

async function verifyBytes(acked) {
  // The trust document as served (its roots are pinned in every rewritten page).
  const trust = await request({ port: nginx.contentPort, path: '/v1/keys/trust' });
  if (trust.status !== 200) throw new Error(`GET /v1/keys/trust: ${describe(trust)}`);
  const trustFile = join(scratch, 'trust.json');
  writeFileSync(trustFile, trust.body);
  const env = kilnEnv(cluster, { KILN_DATA_DIR: join(scratch, 'reference-data') });
  const stats = { builds: 0, objects: 0, bytes: 0, mismatches: 0, references: 0, processMs: 0, fetchMs: 0 };
  // Objects are content-addressed: a key compared once (its bytes fetched and found equal to
  // what `process` wrote under that key) need not be fetched again for the next build listing
  // it; `references` counts every (build, object) pair checked either way.
  const compared = new Map(); // key → sha256 of the bytes both sides had
  const queue = [...acked];
  const one = async (pkg) => {
    const b = pkg.build;
    const out = join(scratch, 'reference', String(pkg.n));
    const started = Date.now();
    const r = await runAsync(bins.worker, [
      'process', pkg.file, '--out', out,
      '--game', pkg.game, '--version', pkg.version, '--build-id', b.id,
      '--key', cluster.signingKey, '--trust', trustFile,
      '--cdn-base', `${nginx.contentUrl}/cdn`,
    ], { env });
    stats.processMs += Date.now() - started;
    if (r.status !== 0) {
      fail('byte-identical', `kiln-worker process on package ${pkg.n} exited ${r.status ?? r.sig}: ${r.stderr.slice(-800)}`);
      return;
    }
    const fetchStarted = Date.now();
    // The build's own manifest object, as published, against the local one (only the time
    // it was made differs: the build's upload time against now).
    const served = await request({ port: nginx.contentPort, path: `/cdn/${b.manifest_key}` });
    if (served.status !== 200) {
      fail('byte-identical', `build ${b.id}: GET /cdn/${b.manifest_key}: ${describe(served)}`);
      return;
    }
    const strip = (m) => {
      const copy = { ...m };
      delete copy.created_at;
      return JSON.stringify(copy);
    };
    const mine = JSON.parse(served.body.toString('utf8'));
    const reference = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8'));
    if (strip(mine) !== strip(reference)) {
      stats.mismatches++;
      fail('byte-identical', `build ${b.id} (package ${pkg.n}): its manifest differs from kiln-worker process's:\n  published: ${strip(mine).slice(0, 600)}\n  process:   ${strip(reference).slice(0, 600)}`);
      return;
    }
    // Every object `process` wrote (files and their br/gzip forms), fetched raw from /cdn.
    const keys = [];
    const walk = (dir) => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else keys.push(relative(out, p));
      }
    };
    for (const top of ['files', 'library']) if (existsSync(join(out, top))) walk(join(out, top));
    const listed = new Set();
    for (const f of mine.files) {
      listed.add(f.key);
      for (const e of f.encodings || []) listed.add(e.key);
    }
    const written = new Set(keys);
    for (const k of listed) {
      if (!written.has(k) && !k.startsWith('library/')) fail('byte-identical', `build ${b.id}: ${k} is in the manifest but kiln-worker process wrote no such object`);
    }
    for (const key of keys) {
      if (!listed.has(key) && !key.startsWith('library/')) {
        fail('byte-identical', `build ${b.id}: kiln-worker process wrote ${key}, which the published manifest does not list`);
        continue;
      }
      const want = readFileSync(join(out, key));
      stats.references++;
      const wantSha = sha256(want);
      if (compared.has(key)) {
        if (compared.get(key) !== wantSha) {
          stats.mismatches++;
          fail('byte-identical', `build ${b.id}: kiln-worker process wrote other bytes under ${key} than for an earlier build`);
        }
        continue;
      }
      const got = await request({ port: nginx.contentPort, path: `/cdn/${key}` });
      stats.objects++;
      stats.bytes += want.length;
      if (got.status !== 200 || !got.body.equals(want)) {
        stats.mismatches++;
        fail('byte-identical', `build ${b.id}: /cdn/${key}: ${got.status === 200 ? `${got.body.length} bytes, sha256 ${sha256(got.body)}; process wrote ${want.length} bytes, sha256 ${wantSha}` : describe(got)}`);
      } else compared.set(key, wantSha);
    }
    stats.fetchMs += Date.now() - fetchStarted;
    stats.builds++;
    rmSync(out, { recursive: true, force: true });
  };
  const lanes = Array.from({ length: 3 }, async () => {
    while (queue.length) await one(queue.shift());
  });
  await Promise.all(lanes);
  return stats;
}

async function checkReleases(byId) {
  // One statement: one snapshot of the releases and the games' live pointers.
  const [snap] = await rows(dbUrl, `SELECT
      (SELECT coalesce(json_agg(r ORDER BY r.game, r.sequence), '[]') FROM (SELECT game, sequence, build_id, reason, sha256 FROM releases) r) AS releases,
      (SELECT coalesce(json_agg(g), '[]') FROM (SELECT name, live_build_id, live_sequence FROM games) g) AS games`);
  const { releases, games } = snap;
  const stats = { releases: releases.length, publish: 0, resign: 0, release: 0, games: games.length, served: 0 };
  const order = (id) => {
    const b = byId.get(id);
    return b ? [b.created_at, b.id] : null;
  };
  const after = (a, b) => a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]);
  for (const g of games) {
    const history = releases.filter((r) => r.game === g.name);
    const listing = () => history.map((r) => `${r.sequence} ${r.reason} ${r.build_id}`).join('\n    ');
    history.forEach((r, i) => {
      if (Number(r.sequence) !== i + 1) fail('release order', `${g.name}: sequence ${r.sequence} at position ${i + 1} (gap or duplicate)\n    ${listing()}`);
    });
    let live = null;
    let newest = null;
    const publishes = new Map();
    for (const r of history) {
      stats[r.reason] = (stats[r.reason] || 0) + 1;
      const b = byId.get(r.build_id);
      if (!b || b.status !== 'published') fail('half-live', `${g.name} release ${r.sequence} (${r.reason}) names build ${r.build_id}, which is ${b ? b.status : 'missing'}`);
      if (r.reason === 'publish') {
        publishes.set(r.build_id, (publishes.get(r.build_id) || 0) + 1);
        const mine = order(r.build_id);
        if (newest && mine && !after(mine, newest)) fail('release order', `${g.name} sequence ${r.sequence}: the publish of ${r.build_id} replaced a build uploaded after it\n    ${listing()}`);
        newest = mine;
        live = r.build_id;
      } else if (r.reason === 'resign') {
        if (r.build_id !== live) fail('release order', `${g.name} sequence ${r.sequence}: a re-sign made ${r.build_id} live (live was ${live})\n    ${listing()}`);
      } else if (r.reason === 'release') {
        live = r.build_id;
      } else fail('release order', `${g.name}: unknown reason ${r.reason}`);
    }
    for (const [id, count] of publishes) if (count > 1) fail('duplicates', `${g.name}: build ${id} was published ${count} times (publish releases)`);
    // Every published build of the game went live by its publish, or a build uploaded after
    // it had (a late publish is kept from going live).
    const published = [...byId.values()].filter((b) => b.game === g.name && b.status === 'published');
    for (const b of published) {
      if (publishes.has(b.id)) continue;
      const mine = [b.created_at, b.id];
      const newer = history.some((r) => r.reason === 'publish' && order(r.build_id) && after(order(r.build_id), mine));
      if (!newer) fail('published once', `${g.name}: build ${b.id} is published but never went live and no newer build did`);
    }
    // Live: the newest published build, as the game's row and both replicas say.
    const last = history[history.length - 1];
    const newestPublished = published.sort((a, b) => (after([a.created_at, a.id], [b.created_at, b.id]) ? -1 : 1))[0];
    if (!last) continue;
    if (g.live_build_id !== last.build_id || Number(g.live_sequence) !== Number(last.sequence)) {
      fail('release order', `${g.name}: games row says live ${g.live_build_id} @${g.live_sequence}, releases say ${last.build_id} @${last.sequence}`);
    }
    if (newestPublished && last.build_id !== newestPublished.id) fail('release order', `${g.name}: live is ${last.build_id}, the newest published build is ${newestPublished.id}`);
    // Each replica serves the live release's exact bytes. A re-sign may land between the
    // read and the request: then it must serve the new live one (read again, a few times).
    for (const a of apis) {
      let seen = '';
      try {
        await until(`${a.role} serves ${g.name}'s live release`, async () => {
          const [live] = await rows(dbUrl, `SELECT sha256, sequence FROM releases WHERE game = '${g.name}' ORDER BY sequence DESC LIMIT 1`);
          const r = await request({ port: a.contentPort, path: `/v1/games/${g.name}/manifest` });
          seen = `${r.status === 200 ? `sha256 ${sha256(r.body)}` : describe(r)}; the live release is ${live.sha256} (sequence ${live.sequence})`;
          return r.status === 200 && sha256(r.body) === live.sha256;
        }, { deadlineMs: 20_000, intervalMs: 500 });
        stats.served++;
      } catch {
        fail('release order', `${a.role} serves ${g.name}'s manifest as ${seen}`);
      }
    }
  }
  return stats;
}

async function checkBeacons() {
  const stored = await rows(dbUrl, `SELECT asset, count(*)::int AS n FROM telemetry_events WHERE asset LIKE 'fault/${runTag}/%' GROUP BY asset`);
  const counts = new Map(stored.map((r) => [r.asset, r.n]));
  const stats = { sent: beacons.length, accepted: 0, stored: 0, refused503: 0, limited429: 0, cut: 0, missing: 0, duplicated: 0, cutStored: 0 };
  const missing = [];
  for (const b of beacons) {
    const present = b.assets.filter((a) => counts.get(a) > 0).length;
    for (const a of b.assets) if ((counts.get(a) || 0) > 1) stats.duplicated++;
    if (present > 0 && present < b.assets.length) fail('beacons', `beacon ${b.n}: ${present} of its ${b.assets.length} events stored (a batch split)`);
    if (b.status === 202) {
      stats.accepted++;
      if (present === b.assets.length) stats.stored++;
      else {
        stats.missing++;
        missing.push(b);
      }
    } else if (b.status === 503) {
      stats.refused503++;
      if (present) fail('beacons', `beacon ${b.n}: answered 503 (nothing kept) but stored`);
    } else if (b.status === 429) stats.limited429++;
    else {
      stats.cut++;
      if (present) stats.cutStored++;
    }
  }
  if (stats.duplicated) fail('beacons', `${stats.duplicated} beacon events stored more than once`);
  if (missing.length) {
    // Which replica answered them, and how long before its next SIGKILL.
    // Which replica answered them, how long before its next SIGKILL or PostgreSQL's next
    // stop: what explains a loss, where something does.
    const groups = {};
    let beforeKill = 0;
    let beforePgStop = 0;
    for (const b of missing) {
      const api = apis.find((a) => b.upstream === `127.0.0.1:${a.contentPort}`);
      const after = (times) => times.filter((t) => t >= b.doneAt).map((t) => t - b.doneAt);
      const kill = api ? after(api.killTimes) : [];
      const stop = after(pgStops);
      const near = [];
      if (kill.length && Math.min(...kill) < 2000) {
        beforeKill++;
        near.push(`${api.role} SIGKILLed ${Math.min(...kill)} ms after it answered`);
      } else if (stop.length && Math.min(...stop) < 2000) {
        beforePgStop++;
        near.push(`PostgreSQL stopped (${opts.pgRestart}) ${Math.min(...stop)} ms after it answered`);
      } else near.push('no fault within 2 s after it answered');
      const k = `${api ? api.role : b.upstream || 'an unknown upstream'}; ${near.join('; ')}`;
      (groups[k] ||= []).push(b.n);
    }
    const lines = Object.entries(groups).map(([k, ns]) => `  beacon #${ns.join(', #')}: answered 202 by ${k}`);
    const why = [];
    if (beforeKill) why.push(`  ${beforeKill} answered by a replica shortly before it was SIGKILLed: kiln-api answers a beacon once its events are queued in memory, before the batched write commits (api/src/ingest.rs), so a killed replica loses what it had not written yet`);
    if (beforePgStop) why.push(`  ${beforePgStop} answered shortly before PostgreSQL stopped: the telemetry write commits with synchronous_commit = off (common/src/db/telemetry.rs), so a database crash loses the last moments of committed beacons`);
    const whyText = why.length ? `\n${why.join('\n')}` : '';
    fail('beacons', `${missing.length} beacon(s) answered 202 are not stored:\n${lines.slice(0, 12).join('\n')}${lines.length > 12 ? `\n  … ${lines.length - 12} more` : ''}${whyText}`);
    stats.missingDetail = lines;
  }
  return stats;
}

function checkMemory(runEnd) {
  const rowsOut = [];
  for (const p of cluster.procs) {
    const life = (p.endedAt ?? runEnd) - p.startedAt;
    const s = p.samples;
    if (s.length < 8) continue;
    const checked = life >= P.rssMinLifeMs && !p.killedOnPurpose;
    const start = p.startedAt;
    const at = (share) => start + share * life;
    const baseline = Math.max(...s.filter(([t]) => t >= at(0.25) && t <= at(0.5)).map(([, v]) => v), 0);
    // The floor of its last 5 s: what it keeps. (The median was the 3rd highest of five, so
    // a worker that ran a build in its last seconds, its RSS back at the baseline a second
    // later, failed: 213, 134, 131 MiB, then 52 and 44.)
    const end = Math.min(...s.slice(-5).map(([, v]) => v));
    const peak = Math.max(...s.map(([, v]) => v));
    const bound = baseline * (1 + RSS_GROWTH_SHARE) + RSS_GROWTH_BYTES;
    const ok = !checked || baseline === 0 || end <= bound;
    rowsOut.push({ role: p.role, instance: p.instance, pid: p.pid, life, first: s[0][1], baseline, end, peak, bound, checked, ok });
    if (!ok) fail('memory', `${p.role} (pid ${p.pid}): RSS ${mib(end)} MiB at the end, baseline ${mib(baseline)} MiB: more than ${RSS_GROWTH_SHARE * 100} % + ${mib(RSS_GROWTH_BYTES)} MiB`);
  }
  return rowsOut;
}

// ---------------------------------------------------------------------------------------
// The run.

async function main() {
  log(`kiln fault harness, ${profileName} profile, seed ${initialSeed}, binaries ${bins.dir}`);
  log(`scratch ${scratch}`);
  await pg.start();
  dbUrl = pg.url('kiln_faults');
  await exec(pg.url('postgres'), 'CREATE DATABASE kiln_faults');
  cluster.databaseUrl = dbUrl;
  await garage.start();
  garage.proc.role = 'garage';
  cluster.track(garage.proc);
  pg.proc.role = 'postgres';
  log(`PostgreSQL ${pg.url('')} (own instance), Garage ${garage.endpoint}`);
  await nginx.reserve();
  for (const a of apis) await a.reserve();
  // One API first: it migrates the database; then the root and signing keys and the first
  // trust document, once, where the root key is.
  await apis[0].start();
  const init = run(bins.worker, ['keys', 'init'], {
    env: kilnEnv(cluster, { KILN_DATA_DIR: join(scratch, 'keys-data'), KILN_ROOT_KEY_FILE: cluster.rootKey, KILN_SIGNING_KEY_FILE: cluster.signingKey }),
  });
  if (init.status !== 0) throw new Error(`kiln-worker keys init: ${init.stderr}`);
  await apis[1].start();
  await nginx.start(apis);
  cluster.track(nginx.proc);
  log(`nginx: API ${nginx.url}, content ${nginx.contentUrl} → ${apis.map((a) => `${a.role} :${a.port}/:${a.contentPort}`).join(', ')}`);
  await Promise.all(Array.from({ length: WORKER_SLOTS }, (_, slot) => startWorker(slot, { stagePauseMs: P.stagePauseMs, concurrency: 1 })));
  log(`${WORKER_SLOTS} workers up`);

  // A team and its token.
  const adminHeaders = { authorization: `Bearer ${cluster.admin}`, 'content-type': 'application/json' };
  const team = await request({ port: nginx.port, method: 'POST', path: '/v1/teams', headers: adminHeaders, body: Buffer.from(JSON.stringify({ name: `faults-${runTag}` })) });
  if (team.status !== 201 && team.status !== 200) throw new Error(`create team: ${describe(team)}`);
  const tok = await request({ port: nginx.port, method: 'POST', path: `/v1/teams/${json(team).id}/tokens`, headers: { authorization: `Bearer ${cluster.admin}` } });
  if (![200, 201].includes(tok.status)) throw new Error(`create token: ${describe(tok)}`);
  token = json(tok).token;

  const stopSampler = samplerStart();
  const stopWatcher = startWatcher();
  const stopBeacons = startBeacons();

  // --- fault phase ---------------------------------------------------------------------
  const faultStart = Date.now();
  let stopUploads = startUploads('fault');
  await until('warm-up builds published', async () => {
    return packages.filter((p) => p.acked && builds.get(p.acked.build_id)?.status === 'published').length >= P.warmupBuilds;
  }, { deadlineMs: 180_000, intervalMs: 500 });
  log(`warm: ${P.warmupBuilds} builds published; faults start`);
  for (const [r, round] of P.rounds.entries()) {
    log(`round ${r + 1}/${P.rounds.length}: ${round.join(', ')}`);
    for (const kind of round) {
      await fault(kind);
      await sleep(P.gapMs);
    }
  }
  await stopUploads();
  const faultEnd = Date.now();
  log(`fault phase over (${secs(faultEnd - faultStart)}); draining`);
  const faultPkgs = packages.filter((p) => p.phase === 'fault');
  try {
    await drain('every acknowledged upload of the fault phase published or failed', faultPkgs, 300_000);
  } catch (e) {
    fail('stuck', e.message);
  }

  // --- scaling curve: the same saturated queue, 1, 2, 3 workers ------------------------
  // Workers are added one by one (worker 0 works through every window, its memory too); the
  // full profile then takes them away again (1, 2, 3, 2, 1), so a drift in the machine's
  // load during the run weighs on both ends alike. The queue is kept at least
  // `scalingDepth` deep, every package the same shape.
  log('scaling: stopping the fault-phase workers');
  await Promise.all(workers.map((w) => w.proc.stop(30_000)));
  const curve = [];
  let keeperStop = false;
  const scalingPkgs = () => packages.filter((p) => p.phase === 'scaling');
  // Queued builds of the last minute: one a fault left queued for good does not count.
  const queuedNow = async () => (await rows(dbUrl, `SELECT count(*)::int AS n FROM builds WHERE status = 'queued' AND created_at > '${new Date(Date.now() - 60_000).toISOString()}'`))[0].n;
  const keepQueueFull = async () => {
    const mine = new Set();
    while (!keeperStop) {
      let queued = 0;
      try {
        queued = await queuedNow();
      } catch {
        await sleep(500);
        continue;
      }
      const want = Math.min(4, P.scalingDepth - queued - mine.size);
      for (let i = 0; i < want; i++) {
        const p = offer(makePackage('scaling')).finally(() => mine.delete(p));
        mine.add(p);
      }
      await sleep(want > 0 ? 50 : 200);
    }
    await Promise.allSettled([...mine]);
  };
  const keeper = keepQueueFull();
  await until('scaling queue filled', async () => (await queuedNow()) >= P.scalingDepth, { deadlineMs: 120_000 });
  const plan = opts.quick ? [1, 2, 3] : [1, 2, 3, 2, 1];
  let running = 0;
  for (const k of plan) {
    while (running < k) await startWorker(running++, { stagePauseMs: 0, concurrency: 1 });
    while (running > k) await workers[--running].proc.stop(60_000);
    await sleep(1000); // the newest worker's first poll; the window counts from here
    // What the workers and the machine spent meanwhile: a window whose machine had no idle
    // CPU left measures the machine (shared, here), not how Kiln's workers scale.
    const inWindow = workers.slice(0, k).map((w) => w.proc);
    const cpu0 = inWindow.map((p) => cpuTicks(p.pid));
    const m0 = machineTicks();
    const from = Date.now();
    await sleep(P.scalingWindowMs);
    const to = Date.now();
    const workerCpu = inWindow.reduce((sum, p, i) => sum + cpuTicks(p.pid) - cpu0[i], 0) / CLK_TCK;
    const m1 = machineTicks();
    const idle = (m1.idle - m0.idle) / Math.max(1, m1.total - m0.total);
    await until('build states readable', () => pollBuilds().then(() => true), { deadlineMs: 30_000 });
    const done = [...builds.values()].filter((b) => b.published_at && Date.parse(b.published_at) >= from && Date.parse(b.published_at) < to).length;
    const queued = await queuedNow().catch(() => NaN);
    curve.push({ workers: k, builds: done, seconds: (to - from) / 1000, queued, workerCpu, idle });
    log(`scaling: ${k} worker(s): ${done} builds in ${secs(to - from)} = ${((done / (to - from)) * 60_000).toFixed(1)} builds/min (queue ${queued} deep at the end; workers used ${workerCpu.toFixed(1)} CPU-s; machine ${(idle * 100).toFixed(0)} % idle)`);
    // A queue that ran dry would make the window measure the load, not the workers.
    if (queued === 0) curve[curve.length - 1].dry = true;
  }
  // The workers that stopped come back for the drain and the checks.
  while (running < WORKER_SLOTS) await startWorker(running++, { stagePauseMs: 0, concurrency: 1 });
  keeperStop = true;
  await keeper;
  results.curve = curve;
  try {
    await drain('every acknowledged upload of the scaling phase published or failed', scalingPkgs(), 300_000);
  } catch (e) {
    fail('stuck', e.message);
  }
  await stopBeacons();
  // Beacons answered 202 are written within the flush interval; give the writers time.
  const accepted = beacons.filter((b) => b.status === 202);
  try {
    await until('every beacon answered 202 stored', async () => {
      const r = await rows(dbUrl, `SELECT count(*)::int AS n FROM telemetry_events WHERE asset LIKE 'fault/${runTag}/%'`);
      return r[0].n >= accepted.reduce((s, b) => s + b.assets.length, 0);
    }, { deadlineMs: 20_000, intervalMs: 500 });
  } catch {
    /* counted below, beacon by beacon */
  }
  const runEnd = Date.now();
  stopSampler();
  await stopWatcher();

  // --- checks --------------------------------------------------------------------------
  log('checking');
  const all = await rows(dbUrl, `SELECT id, game, version, status, idempotency_key, package_sha256, manifest_key, created_at, error FROM builds`);
  const byId = new Map(all.map((b) => [b.id, b]));
  const manifests = await rows(dbUrl, `SELECT build_id, count(*)::int AS n FROM manifests GROUP BY build_id`);
  const manifestCount = new Map(manifests.map((m) => [m.build_id, m.n]));
  const byKey = new Map();
  const bySha = new Map();
  for (const b of all) {
    (byKey.get(b.idempotency_key) || byKey.set(b.idempotency_key, []).get(b.idempotency_key)).push(b);
    (bySha.get(b.package_sha256) || bySha.set(b.package_sha256, []).get(b.package_sha256)).push(b);
  }
  const counts = { offered: 0, acknowledged: 0, published: 0, duplicated: 0, lost: 0, refused: 0, cutOff: 0, orphans: 0, halfLive: 0 };
  const latencies = [];
  const ackedPublished = [];
  const orphansPublished = [];
  for (const pkg of packages) {
    counts.offered++;
    const mine = [...new Set([...(byKey.get(pkg.key) || []), ...(bySha.get(pkg.sha) || [])])];
    if (mine.length > 1) {
      counts.duplicated++;
      fail('duplicates', `package ${pkg.n} has ${mine.length} builds: ${mine.map((b) => `${b.id} ${b.status}`).join(', ')}`);
    }
    const cut = pkg.attempts.filter((a) => a.status !== 202 && a.status !== 200);
    if (cut.some((a) => a.code === 'TIMEOUT')) fail('cut-off uploads', `package ${pkg.n}: an attempt hung (no answer within its timeout)`);
    if (cut.length) counts.cutOff++;
    if (!pkg.acked) {
      counts.refused++;
      // Cut off (or refused on every attempt): any build it left must not be live or
      // half-done and claiming anything.
      for (const b of mine) {
        counts.orphans++;
        log(`  upload ${pkg.n} (${pkg.victim ? `cut off ${pkg.victim} by the replica kill` : 'never acknowledged'}) left build ${b.id}: ${b.status}`);
        // A body cut off in the middle cannot have made a build; any other left-over build
        // must at least have finished (published or failed), not wait for ever half-done.
        if (b.status === 'published') {
          pkg.build = b;
          orphansPublished.push(pkg);
        }
        if (pkg.victim === 'mid-body') fail('cut-off uploads', `upload ${pkg.n} was cut off mid-body, yet build ${b.id} exists (${b.status})`);
        else if (!['published', 'failed'].includes(b.status)) fail('cut-off uploads', `upload ${pkg.n}, never acknowledged, left build ${b.id} ${b.status} for good`);
      }
      continue;
    }
    counts.acknowledged++;
    const b = byId.get(pkg.acked.build_id);
    if (!b) {
      counts.lost++;
      fail('lost', `package ${pkg.n}: acknowledged as build ${pkg.acked.build_id}, which does not exist`);
      continue;
    }
    if (b.idempotency_key !== pkg.key || b.package_sha256 !== pkg.sha) fail('duplicates', `package ${pkg.n}: acknowledged as build ${b.id}, which is another package's (${b.idempotency_key})`);
    if (b.status !== 'published') {
      counts.lost++;
      let jobs = '';
      try {
        const j = await rows(dbUrl, `SELECT status, attempts, last_result::text AS last_result FROM apalis.jobs WHERE position('${b.id}' IN convert_from(job, 'UTF8')) > 0`);
        jobs = j.length ? j.map((x) => `queue job ${x.status}, ${x.attempts} attempt(s)${x.last_result ? `: ${x.last_result.slice(0, 200)}` : ''}`).join('; ') : 'no queue job for it';
      } catch (e) {
        jobs = `(queue not readable: ${e.message.slice(0, 120)})`;
      }
      fail('lost', `package ${pkg.n} (${pkg.phase}): acknowledged (${pkg.acked.status} after ${pkg.attempts.length} attempt(s)) as build ${b.id}, which is ${b.status}${b.error ? `: ${b.error}` : ''}; ${jobs}`);
      continue;
    }
    if ((manifestCount.get(b.id) || 0) !== 1) fail('duplicates', `build ${b.id}: ${manifestCount.get(b.id) || 0} manifests`);
    counts.published++;
    pkg.build = b;
    ackedPublished.push(pkg);
    const publishedAt = Date.parse(builds.get(b.id)?.published_at ?? '');
    if (pkg.phase === 'fault' && Number.isFinite(publishedAt)) latencies.push(publishedAt - pkg.attempts[0].at);
  }
  // Builds of packages we never offered would be someone else's: there must be none.
  const known = new Set(packages.map((p) => p.key));
  for (const b of all) if (!known.has(b.idempotency_key)) fail('duplicates', `build ${b.id} belongs to no offered package (${b.idempotency_key})`);
  // Nothing half-done claims to be live: every live build is published (checked with the
  // releases) and every object of its manifest is served.
  const liveRows = await rows(dbUrl, `SELECT name, live_build_id FROM games WHERE live_build_id IS NOT NULL`);
  for (const g of liveRows) {
    const b = byId.get(g.live_build_id);
    if (!b || b.status !== 'published') {
      counts.halfLive++;
      fail('half-live', `${g.name}: live build ${g.live_build_id} is ${b ? b.status : 'missing'}`);
    }
  }
  results.releases = await checkReleases(byId);
  log(`byte comparison: ${ackedPublished.length + orphansPublished.length} builds against kiln-worker process`);
  results.bytes = await verifyBytes([...ackedPublished, ...orphansPublished]);
  log(`  ${results.bytes.builds} builds compared: ${secs(results.bytes.processMs)} in kiln-worker process, ${secs(results.bytes.fetchMs)} fetching (summed over 3 lanes)`);
  results.beacons = await checkBeacons();
  results.memory = checkMemory(runEnd);
  // Every instance's RSS samples, for a memory failure's post-mortem (kept with the logs).
  writeFileSync(join(scratch, 'rss.json'), JSON.stringify(cluster.procs.map((p) => ({ role: p.role, instance: p.instance, pid: p.pid, startedAt: p.startedAt, endedAt: p.endedAt, samples: p.samples }))));
  latencies.sort((a, b) => a - b);
  results.latency = { n: latencies.length, p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), max: latencies[latencies.length - 1] };
  results.counts = counts;
  results.faultSeconds = (faultEnd - faultStart) / 1000;
  printTable();
}

function printTable() {
  const c = results.counts;
  const lines = [];
  const row = (k, v) => lines.push(`  ${k.padEnd(46)} ${v}`);
  lines.push('', `== kiln fault harness: ${profileName} profile, seed ${initialSeed}, ${bins.dir.endsWith('release') ? 'release' : 'debug'} binaries, ${secs(Date.now() - t0)} ==`);
  lines.push(`  2 kiln-api behind nginx, ${WORKER_SLOTS} kiln-worker (concurrency 1, heartbeat ${cluster.heartbeatSecs} s), own PostgreSQL 15, own Garage; ${cpus().length} CPUs, load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  lines.push('', 'uploads');
  row('offered', c.offered);
  row('acknowledged (202, or 200 after a cut-off)', `${c.acknowledged}   (${tally.retriedThenAcked} after a retry)`);
  row('published', c.published);
  row('duplicated', c.duplicated);
  row('lost (acknowledged, not published)', c.lost);
  row('never acknowledged', `${c.refused}   (cut-off victims and uploads refused on every try)`);
  row('builds left by those', `${c.orphans}`);
  row('uploads with a cut-off or refused attempt', c.cutOff);
  row('attempts / errors', `${tally.attempts} / ${Object.entries(tally.errors).map(([k, v]) => `${k} ×${v}`).join(', ') || 'none'}`);
  row('hung attempts (no answer)', tally.hung);
  row('half-builds claiming to be live', c.halfLive);
  lines.push('', 'faults');
  row('worker SIGKILL', `${kills.worker}   (${kills.workerMidJob} with a job running)`);
  row('API replica SIGKILL mid-upload', `${kills.api}   (${kills.api - kills.apiAfterBody} mid-body: ${kills.apiVictimCut} cut off with an error; ${kills.apiAfterBody} just after the body, then retried)`);
  row(`PostgreSQL restart (${opts.pgRestart} shutdown)`, `${kills.postgres}   (${secs(opts.pgDownMs)} down${opts.pgRestart === 'immediate' ? ', then crash recovery' : ''})`);
  row('API SIGKILL between build row and queue job', `${kills.apiCommit}${kills.apiCommit ? '   (held there by a trigger on the queue insert; then retried)' : ''}`);
  row('Garage stopped 10 s (SIGSTOP)', kills['garage-stop']);
  row('Garage killed, 10 s down (SIGKILL)', kills['garage-kill']);
  const rec = faultLog.filter((f) => f.recoveredAt).map((f) => f.recoveredAt - f.endedAt).sort((a, b) => a - b);
  row('first publish after a fault ended (median/max)', rec.length ? `${secs(quantile(rec, 0.5))} / ${secs(rec[rec.length - 1])}` : 'n/a');
  lines.push('', 'time from upload to published (fault phase)');
  const L = results.latency;
  row(`p50 / p99 / max (${L.n} builds)`, L.n ? `${secs(L.p50)} / ${secs(L.p99)} / ${secs(L.max)}` : 'n/a');
  lines.push('', 'releases');
  const R = results.releases;
  row('releases (publish / resign / release)', `${R.releases} (${R.publish} / ${R.resign} / ${R.release || 0}) over ${R.games} games`);
  row('live manifest served byte-exact (replica × game)', R.served);
  lines.push('', 'outputs against kiln-worker process');
  const B = results.bytes;
  row('builds compared (manifest + every object)', `${B.builds}   (${B.references} build × object pairs)`);
  row('distinct objects fetched from /cdn and compared', `${B.objects} (${mib(B.bytes)} MiB)`);
  row('mismatches', B.mismatches);
  lines.push('', 'beacons');
  const T = results.beacons;
  row('sent / answered 202 / stored of those', `${T.sent} / ${T.accepted} / ${T.stored}`);
  row('missing (answered 202, not stored)', T.missing);
  row('refused 503 / 429 / cut off (no answer or 5xx)', `${T.refused503} / ${T.limited429} / ${T.cut} (${T.cutStored} of those stored anyway)`);
  lines.push('', `worker scaling (builds/min on the same saturated queue: packages of one shape, a 150 KB script each; stage pause 0; ${opts.quick ? '1, 2, 3' : '1, 2, 3, 2, 1'} workers)`);
  lines.push(`  ${'workers'.padEnd(18)}${'builds'.padStart(8)}${'window'.padStart(10)}${'builds/min'.padStart(12)}${'× 1 worker'.padStart(12)}${'CPU/build'.padStart(14)}${'machine idle'.padStart(14)}`);
  const perK = new Map();
  for (const p of results.curve) {
    const e = perK.get(p.workers) || { builds: 0, seconds: 0, windows: 0, dry: false, cpu: 0, idleSum: 0 };
    e.dry ||= Boolean(p.dry);
    e.cpu += p.workerCpu;
    e.idleSum += p.idle * p.seconds;
    e.builds += p.builds;
    e.seconds += p.seconds;
    e.windows++;
    perK.set(p.workers, e);
  }
  const one = perK.get(1);
  for (const [k, e] of [...perK].sort((a, b) => a[0] - b[0])) {
    const rate = (e.builds / e.seconds) * 60;
    const cpuPerBuild = e.builds ? `${(e.cpu / e.builds).toFixed(2)} s` : '-';
    lines.push(`  ${`${k}${e.windows > 1 ? ` (${e.windows} windows)` : ''}`.padEnd(18)}${String(e.builds).padStart(8)}${secs(e.seconds * 1000).padStart(10)}${rate.toFixed(1).padStart(12)}${(one ? rate / ((one.builds / one.seconds) * 60) : NaN).toFixed(2).padStart(12)}${cpuPerBuild.padStart(14)}${`${((e.idleSum / e.seconds) * 100).toFixed(0)} %`.padStart(14)}${e.dry ? '   (the queue ran dry: a lower bound)' : ''}`);
  }
  lines.push('', `memory (RSS MiB; bound: end ≤ baseline × ${1 + RSS_GROWTH_SHARE} + ${mib(RSS_GROWTH_BYTES)}, baseline = highest in the 2nd quarter of the instance's life;`);
  lines.push(`  checked for every instance not killed on purpose that lived ≥ ${secs(P.rssMinLifeMs)})`);
  lines.push(`  ${'process'.padEnd(12)}${'pid'.padStart(8)}${'life'.padStart(9)}${'first'.padStart(8)}${'baseline'.padStart(10)}${'end'.padStart(8)}${'peak'.padStart(8)}${'bound'.padStart(8)}  check`);
  for (const m of results.memory) {
    lines.push(`  ${m.role.padEnd(12)}${String(m.pid).padStart(8)}${secs(m.life).padStart(9)}${mib(m.first).padStart(8)}${mib(m.baseline).padStart(10)}${mib(m.end).padStart(8)}${mib(m.peak).padStart(8)}${mib(m.bound).padStart(8)}  ${m.checked ? (m.ok ? 'ok' : 'GREW') : '-'}`);
  }
  lines.push('');
  if (failures.length) {
    const byCheck = {};
    for (const f of failures) (byCheck[f.check] ||= []).push(f.message);
    lines.push(`FAILED: ${failures.length} problem(s)`);
    for (const [k, ms] of Object.entries(byCheck)) {
      lines.push(`  [${k}] ${ms.length}`);
      for (const m of ms.slice(0, 8)) lines.push(`    - ${m.split('\n').join('\n      ')}`);
      if (ms.length > 8) lines.push(`    … ${ms.length - 8} more`);
    }
  } else lines.push('PASSED: nothing lost, duplicated, out of order or half-live; every 202 beacon stored; memory within bounds');
  console.log(lines.join('\n'));
}

let code = 0;
try {
  await main();
  code = failures.length ? 1 : 0;
} catch (e) {
  console.error(`\nkiln faults: ${e.stack || e.message}`);
  if (results.counts) printTable();
  code = 2;
  opts.keep = true;
}
await teardown();
process.exit(code);
