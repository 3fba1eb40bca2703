// The platform under test, all real processes on loopback: our own PostgreSQL instance (never
// the machine's shared cluster: this one gets restarted), our own Garage, nginx in front of two
// kiln-api replicas (API and content origins), and kiln-worker processes.
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from './http.mjs';
import { Proc, exec, freePort, idOf, run, sleep, tail, until } from './procs.mjs';

const PG_BIN = process.env.KILN_PG_BIN || '/usr/lib/postgresql/15/bin';
const NGINX = process.env.KILN_NGINX || '/usr/sbin/nginx';
const GARAGE = process.env.KILN_GARAGE || join(process.env.KILN_TOOLS_DIR || join(process.env.HOME || '/root', '.cache/kiln-tools'), 'bin/garage');

const hex = (n) => randomBytes(n).toString('hex');

/** Whether loopback answers HTTP on `port` with a status in `ok` (default 2xx). */
async function answers(port, path, ok = (s) => s >= 200 && s < 300) {
  const r = await request({ port, path, timeoutMs: 5000 });
  return !r.error && ok(r.status);
}

export class Postgres {
  constructor(dir) {
    this.dir = dir;
    this.data = join(dir, 'data');
    this.log = join(dir, 'postgres.log');
    this.restarts = 0;
  }

  async start() {
    mkdirSync(this.dir, { recursive: true });
    // initdb and postgres refuse to run as root: as the `postgres` user where we are root.
    this.user = process.getuid() === 0 ? idOf('postgres') : null;
    if (process.getuid() === 0 && !this.user) throw new Error('running as root and there is no `postgres` user for our own PostgreSQL instance');
    if (this.user) chownSync(this.dir, this.user.uid, this.user.gid);
    const init = run(join(PG_BIN, 'initdb'), ['-D', this.data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync', '--locale=C'], {
      uid: this.user?.uid,
      gid: this.user?.gid,
      env: { PATH: process.env.PATH, LANG: 'C' },
    });
    if (init.status !== 0) throw new Error(`initdb: ${init.stderr || init.stdout}`);
    this.port = await freePort();
    this.url = (db) => `postgres://postgres@127.0.0.1:${this.port}/${db}`;
    await this.launch();
  }

  async launch() {
    this.proc = new Proc('postgres', join(PG_BIN, 'postgres'), [
      '-D', this.data,
      '-p', String(this.port),
      '-k', this.dir,
      '-c', 'listen_addresses=127.0.0.1',
      // A process crash loses nothing with fsync off (the kernel has the writes); only a
      // machine crash would, and this instance lives for one run.
      '-c', 'fsync=off',
      '-c', 'max_connections=200',
      '-c', 'shared_buffers=64MB',
    ], { env: { PATH: process.env.PATH, LANG: 'C' }, logFile: this.log, uid: this.user?.uid, gid: this.user?.gid, stopSignal: 'SIGINT' });
    await until('PostgreSQL accepts connections', async () => {
      if (!this.proc.running) throw new Error(`postgres ${this.proc.describeExit()}:\n${tail(this.log)}`);
      await exec(this.url('postgres'), 'SELECT 1', { timeoutMs: 5000 });
      return true;
    }, { deadlineMs: 60_000 });
  }

  /** Stops the server (`mode`: immediate or fast), `downMs` with no database, starts it again. */
  async restart(downMs, mode = 'immediate') {
    this.signalledAt = Date.now();
    // SIGQUIT: immediate shutdown (a crash: no checkpoint, crash recovery on start);
    // SIGINT: fast shutdown (what `pg_ctl restart` does by default).
    this.proc.signal(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
    await until('PostgreSQL stops', async () => !this.proc.running, { deadlineMs: 30_000, intervalMs: 50 });
    const stoppedAt = Date.now();
    await sleep(downMs);
    await this.launch();
    this.restarts++;
    return { stoppedAt, backAt: Date.now() };
  }

  async stop() {
    await this.proc?.stop(20_000);
  }
}

export class Garage {
  constructor(dir) {
    this.dir = dir;
    this.log = join(dir, 'garage.log');
    this.bucket = 'kiln-faults';
    this.accessKey = `GK${hex(12)}`;
    this.secretKey = hex(32);
  }

  async start() {
    if (!existsSync(GARAGE)) throw new Error(`no Garage at ${GARAGE} (.ci/run builds it; or set KILN_GARAGE)`);
    mkdirSync(this.dir, { recursive: true });
    this.port = await freePort();
    this.rpcPort = await freePort();
    this.conf = join(this.dir, 'garage.toml');
    writeFileSync(this.conf, `metadata_dir = "${this.dir}/meta"
data_dir = "${this.dir}/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:${this.rpcPort}"
rpc_public_addr = "127.0.0.1:${this.rpcPort}"
rpc_secret = "${hex(32)}"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:${this.port}"
root_domain = ".s3.garage.localhost"
`);
    this.endpoint = `http://127.0.0.1:${this.port}`;
    await this.launch();
  }

  async launch() {
    const env = {
      PATH: process.env.PATH,
      RUST_LOG: 'warn',
      GARAGE_DEFAULT_ACCESS_KEY: this.accessKey,
      GARAGE_DEFAULT_SECRET_KEY: this.secretKey,
      GARAGE_DEFAULT_BUCKET: this.bucket,
    };
    this.proc = new Proc('garage', GARAGE, ['-c', this.conf, 'server', '--single-node', '--default-bucket'], { env, logFile: this.log, stopSignal: 'SIGTERM' });
    // Any HTTP answer means the S3 API listens (anonymous requests get 4xx).
    await until('Garage answers', async () => {
      if (!this.proc.running) throw new Error(`garage ${this.proc.describeExit()}:\n${tail(this.log)}`);
      const r = await request({ port: this.port, path: '/', timeoutMs: 3000 });
      return !r.error;
    }, { deadlineMs: 60_000 });
  }

  /** Stopped for `ms`: SIGSTOP (connections hang) then SIGCONT. */
  async freeze(ms) {
    this.proc.signal('SIGSTOP');
    const at = Date.now();
    await sleep(ms);
    this.proc.signal('SIGCONT');
    return { stoppedAt: at, backAt: Date.now() };
  }

  /** Killed (SIGKILL: connections refused), then started again on the same data after `ms`. */
  async killFor(ms) {
    await this.proc.kill();
    const at = Date.now();
    await sleep(ms);
    await this.launch();
    return { stoppedAt: at, backAt: Date.now() };
  }

  async stop() {
    this.proc?.signal('SIGCONT');
    await this.proc?.stop();
  }
}

/**
 * nginx in front of the replicas: one server for the API origin, one for the content origin,
 * round robin over both replicas (a replica that refuses connections is skipped for 2 s). An
 * `X-Kiln-Replica: N` request header pins a request to replica N (how the harness puts an
 * upload on the replica it is about to kill). Every answer says which upstream served it
 * (`X-Kiln-Upstream`).
 */
export class Nginx {
  constructor(dir) {
    this.dir = dir;
    this.log = join(dir, 'nginx.log');
  }

  config(apis) {
    const upstream = (name, ports) => `  upstream ${name} {
${ports.map((p) => `    server 127.0.0.1:${p} max_fails=1 fail_timeout=2s;`).join('\n')}
    keepalive 16;
  }`;
    const pins = (kind, ports) => ports.map((p, i) => upstream(`${kind}_${i}`, [p])).join('\n');
    const server = (port, pool) => `  server {
    listen 127.0.0.1:${port};
    client_max_body_size 0;
    proxy_request_buffering off;
    proxy_buffering off;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host $http_host;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_read_timeout 300s;
    proxy_send_timeout 300s;
    add_header X-Kiln-Upstream $upstream_addr always;
    location / {
      proxy_pass http://$${pool};
    }
  }`;
    return `daemon off;
worker_processes 1;
pid ${this.dir}/nginx.pid;
error_log ${this.dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log ${this.dir}/access.log;
  client_body_temp_path ${this.dir}/tmp/body;
  proxy_temp_path ${this.dir}/tmp/proxy;
  fastcgi_temp_path ${this.dir}/tmp/fastcgi;
  uwsgi_temp_path ${this.dir}/tmp/uwsgi;
  scgi_temp_path ${this.dir}/tmp/scgi;
${upstream('kiln_api', apis.map((a) => a.port))}
${upstream('kiln_content', apis.map((a) => a.contentPort))}
${pins('kiln_api', apis.map((a) => a.port))}
${pins('kiln_content', apis.map((a) => a.contentPort))}
  map $http_x_kiln_replica $api_pool {
    default kiln_api;
${apis.map((_, i) => `    "${i}" kiln_api_${i};`).join('\n')}
  }
  map $http_x_kiln_replica $content_pool {
    default kiln_content;
${apis.map((_, i) => `    "${i}" kiln_content_${i};`).join('\n')}
  }
${server(this.port, 'api_pool')}
${server(this.contentPort, 'content_pool')}
}
`;
  }

  async reserve() {
    this.port = await freePort();
    this.contentPort = await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    this.contentUrl = `http://127.0.0.1:${this.contentPort}`;
  }

  async start(apis) {
    if (!existsSync(NGINX)) throw new Error(`no nginx at ${NGINX} (apt-get install nginx-light, or set KILN_NGINX)`);
    mkdirSync(join(this.dir, 'tmp'), { recursive: true });
    // Started as root, nginx's workers run unprivileged: they must reach their temp folders.
    if (process.getuid() === 0) {
      chmodSync(this.dir, 0o755);
      chmodSync(join(this.dir, 'tmp'), 0o777);
    }
    const conf = join(this.dir, 'nginx.conf');
    writeFileSync(conf, this.config(apis));
    this.proc = new Proc('nginx', NGINX, ['-p', this.dir, '-c', conf, '-e', join(this.dir, 'error.log')], {
      env: { PATH: process.env.PATH },
      logFile: this.log,
      stopSignal: 'SIGTERM',
      withChildren: true,
    });
    await until('nginx answers', async () => {
      if (!this.proc.running) throw new Error(`nginx ${this.proc.describeExit()}:\n${tail(join(this.dir, 'error.log'))}`);
      return answers(this.port, '/healthz');
    }, { deadlineMs: 60_000 });
  }

  async stop() {
    await this.proc?.stop();
  }
}

/**
 * Environment every Kiln process shares (as the chart gives it: the signing key only to
 * workers, the root key only to `keys init`, the admin token only to the APIs).
 */
export function kilnEnv(c, extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('KILN_') && !k.startsWith('AWS_')) env[k] = v;
  return {
    ...env,
    KILN_DATABASE_URL: c.databaseUrl,
    KILN_S3_BUCKET: c.garage.bucket,
    KILN_S3_ENDPOINT: c.garage.endpoint,
    KILN_S3_REGION: 'garage',
    KILN_S3_PATH_STYLE: 'true',
    AWS_ACCESS_KEY_ID: c.garage.accessKey,
    AWS_SECRET_ACCESS_KEY: c.garage.secretKey,
    AWS_REGION: 'garage',
    KILN_PUBLIC_URL: c.nginx.url,
    KILN_CONTENT_URL: c.nginx.contentUrl,
    KILN_TELEMETRY_SECRET_FILE: c.telemetrySecret,
    KILN_WORKER_HEARTBEAT_SECS: String(c.heartbeatSecs),
    KILN_MANIFEST_TTL_SECS: String(c.manifestTtlSecs),
    KILN_RESIGN_INTERVAL_SECS: String(c.resignIntervalSecs),
    RUST_LOG: process.env.RUST_LOG || 'info',
    ...extra,
  };
}

export class Api {
  constructor(cluster, index) {
    this.c = cluster;
    this.index = index;
    this.role = `api-${index}`;
    this.dir = join(cluster.dir, this.role);
    this.log = join(this.dir, 'kiln-api.log');
    this.killTimes = [];
  }

  async reserve() {
    mkdirSync(this.dir, { recursive: true });
    this.port = await freePort();
    this.contentPort = await freePort();
  }

  async start() {
    const env = kilnEnv(this.c, {
      KILN_DATA_DIR: join(this.dir, 'data'),
      KILN_BIND: `127.0.0.1:${this.port}`,
      KILN_CONTENT_BIND: `127.0.0.1:${this.contentPort}`,
      KILN_WORKERS: '0',
      KILN_ADMIN_TOKEN: this.c.admin,
      KILN_TELEMETRY_CLIENT_IP_HEADER: 'X-Forwarded-For',
    });
    this.proc = new Proc(this.role, this.c.bins.api, [], { env, logFile: this.log, stopSignal: 'SIGTERM' });
    this.c.track(this.proc);
    await this.ready();
  }

  async ready(deadlineMs = 120_000) {
    await until(`${this.role} ready`, async () => {
      if (!this.proc.running) throw new Error(`${this.role} ${this.proc.describeExit()}:\n${tail(this.log)}`);
      return (await answers(this.port, '/readyz')) && (await answers(this.contentPort, '/healthz'));
    }, { deadlineMs });
  }

  /** The process's own counter of upload bytes received (its API port's /metrics). */
  async uploadBytes() {
    const r = await request({ port: this.port, path: '/metrics', timeoutMs: 5000 });
    if (r.error || r.status !== 200) return null;
    const m = /^kiln_upload_bytes_total(?:\{[^}]*\})?\s+([0-9.e+]+)/m.exec(r.body.toString('utf8'));
    return m ? Number(m[1]) : 0;
  }

  async kill() {
    this.proc.killedOnPurpose = true;
    await this.proc.kill();
    this.killTimes.push(Date.now());
  }
}

export class Worker {
  constructor(cluster, index, { stagePauseMs, concurrency }) {
    this.c = cluster;
    this.index = index;
    this.role = `worker-${index}`;
    this.dir = join(cluster.dir, this.role);
    this.log = join(this.dir, 'kiln-worker.log');
    this.stagePauseMs = stagePauseMs;
    this.concurrency = concurrency;
  }

  async start() {
    mkdirSync(this.dir, { recursive: true });
    this.metricsPort = await freePort();
    const env = kilnEnv(this.c, {
      KILN_DATA_DIR: join(this.dir, 'data'),
      KILN_WORK_DIR: join(this.dir, 'work'),
      KILN_SIGNING_KEY_FILE: this.c.signingKey,
      KILN_WORKER_CONCURRENCY: String(this.concurrency),
      KILN_WORKER_STAGE_PAUSE_MS: String(this.stagePauseMs),
      KILN_WORKER_METRICS_BIND: `127.0.0.1:${this.metricsPort}`,
      // A build whose API died between its row and its job is queued again after this long
      // (default 30 s; shorter here so the api-commit fault's retry is published sooner).
      KILN_WORKER_ORPHAN_SECS: '10',
    });
    this.proc = new Proc(this.role, this.c.bins.worker, ['run'], { env, logFile: this.log, stopSignal: 'SIGTERM' });
    this.c.track(this.proc);
    // Ready once its metrics listener answers: it opened the database, loaded its key and
    // trust document, and is about to consume.
    await until(`${this.role} up`, async () => {
      if (!this.proc.running) throw new Error(`${this.role} ${this.proc.describeExit()}:\n${tail(this.log)}`);
      return answers(this.metricsPort, '/metrics');
    }, { deadlineMs: 120_000 });
  }
}
