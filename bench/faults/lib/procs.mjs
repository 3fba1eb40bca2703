// Processes the harness starts: spawned, watched, killed on purpose, sampled for memory, and
// all stopped when the harness exits (each by its own pid: only what we started).
import { spawn, spawnSync } from 'node:child_process';
import { openSync, readFileSync, readdirSync, closeSync } from 'node:fs';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const live = new Set();

/** Stops whatever is still running when the harness exits, however it exits. */
export function stopAllNow() {
  for (const p of live) p.signal(p.stopSignal);
}
process.on('exit', stopAllNow);

export { freePort } from '../../load/lib/servers.mjs';

/**
 * Polls `probe` (async, returns a truthy value when done) until it is done or `deadlineMs`;
 * a probe's errors count as not done yet, except those marked `fatal`.
 */
export async function until(what, probe, { deadlineMs = 120_000, intervalMs = 200, maxIntervalMs = 1000 } = {}) {
  const t0 = Date.now();
  let interval = intervalMs;
  let last;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (e) {
      // A probe that knows waiting is pointless says so with `fatal`.
      if (e.fatal) throw new Error(`${what}: ${e.message}`);
      last = e;
    }
    if (Date.now() - t0 > deadlineMs) {
      throw new Error(`${what}: not within ${Math.round(deadlineMs / 1000)} s${last ? ` (last: ${last.message})` : ''}`);
    }
    await sleep(interval);
    interval = Math.min(maxIntervalMs, Math.round(interval * 1.3));
  }
}

export function tail(file, lines = 40) {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** RSS in bytes of `pid` (0 when gone). */
export function rss(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** CPU time of `pid` so far (user + system), in clock ticks (0 when gone). */
export function cpuTicks(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return 0;
  }
}

/** The machine's CPU time so far, in clock ticks: {idle, total} over all CPUs. */
export function machineTicks() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return { idle: f[3] + (f[4] || 0), total: f.reduce((a, b) => a + b, 0) };
}

/** Direct children of `pid` (from /proc). */
export function childrenOf(pid) {
  const out = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return out;
}

let instances = 0;

/**
 * A started process. `role` names it in the tables ("api-0", "worker-2", "garage"); each start
 * is a new instance (its own memory series).
 */
export class Proc {
  constructor(role, cmd, args, { env, logFile, uid, gid, stopSignal = 'SIGTERM', cwd, withChildren = false }) {
    Object.assign(this, { role, cmd, args, env, logFile, uid, gid, stopSignal, cwd, withChildren });
    this.instance = ++instances;
    this.samples = []; // [t, rss]
    this.startedAt = Date.now();
    const fd = openSync(logFile, 'a');
    this.child = spawn(cmd, args, { env, cwd, uid, gid, stdio: ['ignore', fd, fd] });
    closeSync(fd);
    this.pid = this.child.pid;
    live.add(this);
    this.exited = new Promise((r) =>
      this.child.on('exit', (code, sig) => {
        live.delete(this);
        this.endedAt = Date.now();
        this.exit = { code, sig };
        r(this.exit);
      }),
    );
    this.child.on('error', (e) => {
      this.spawnError = e;
    });
  }

  get running() {
    return this.child.exitCode === null && this.child.signalCode === null && !this.spawnError;
  }

  signal(sig) {
    try {
      if (this.running) process.kill(this.pid, sig);
    } catch {
      /* already gone */
    }
  }

  /** SIGKILL and wait for the exit. */
  async kill() {
    this.signal('SIGKILL');
    await this.exited;
  }

  /** The stop signal, then SIGKILL after `graceMs`. */
  async stop(graceMs = 15_000) {
    if (!this.running) return;
    this.signal(this.stopSignal);
    const done = await Promise.race([this.exited, sleep(graceMs).then(() => null)]);
    if (!done) await this.kill();
  }

  /** Takes one memory sample (the process and, for nginx, its workers). */
  sample() {
    if (!this.running) return;
    let total = rss(this.pid);
    if (this.withChildren) for (const c of childrenOf(this.pid)) total += rss(c);
    if (total > 0) this.samples.push([Date.now(), total]);
  }

  describeExit() {
    return this.exit ? `exited (${this.exit.code ?? this.exit.sig})` : 'running';
  }
}

/** Runs a command to completion; returns {status, stdout, stderr}. */
export function run(cmd, args, { env, uid, gid, input, timeoutMs = 120_000 } = {}) {
  const r = spawnSync(cmd, args, { env, uid, gid, input, timeout: timeoutMs, maxBuffer: 256 << 20 });
  return { status: r.status, stdout: r.stdout?.toString('utf8') ?? '', stderr: r.stderr?.toString('utf8') ?? '', error: r.error };
}

/** Runs a command asynchronously (several `kiln-worker process` at once). */
export function runAsync(cmd, args, { env, timeoutMs = 600_000 } = {}) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out = [];
    const err = [];
    child.stdout.on('data', (d) => out.push(d));
    child.stderr.on('data', (d) => err.push(d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (status, sig) => {
      clearTimeout(timer);
      resolve({ status, sig, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      resolve({ status: null, error: e, stdout: '', stderr: e.message });
    });
  });
}

/**
 * A query through `psql`, answered as JSON rows: `rows(url, "SELECT …")` wraps it in
 * json_agg. Rejects when psql fails (the database down, a bad query).
 */
export async function rows(url, query, { timeoutMs = 30_000 } = {}) {
  const sql = `SELECT coalesce(json_agg(t), '[]'::json) FROM (${query}) t`;
  const r = await runAsync('psql', ['-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url, '-c', sql], { timeoutMs });
  if (r.status !== 0) throw new Error(`psql: ${r.stderr.trim() || `exit ${r.status ?? r.sig}`}`);
  return JSON.parse(r.stdout.trim() || '[]');
}

export async function exec(url, sql, { timeoutMs = 30_000 } = {}) {
  const r = await runAsync('psql', ['-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url, '-c', sql], { timeoutMs });
  if (r.status !== 0) throw new Error(`psql: ${r.stderr.trim() || `exit ${r.status ?? r.sig}`}`);
  return r.stdout;
}

export function idOf(user) {
  const r = run('id', ['-u', user]);
  const g = run('id', ['-g', user]);
  if (r.status !== 0 || g.status !== 0) return null;
  return { uid: Number(r.stdout.trim()), gid: Number(g.stdout.trim()) };
}
