// The two servers the benchmark compares: a scratch Kiln (kiln-api, embedded deployment) and
// a plain nginx serving the same unpacked builds.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';

const children = new Set();

/** Kills every child still running (also from process 'exit', synchronously). */
export function killAll(signal = 'SIGTERM') {
  for (const c of children) {
    try {
      c.kill(signal);
    } catch {
      /* already gone */
    }
  }
}
// Last resort when Node exits with children still running. SIGTERM, not SIGKILL: nginx's
// master must live long enough to stop its workers.
process.on('exit', () => killAll('SIGTERM'));

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function startChild(cmd, args, { env, logFile }) {
  const fd = openSync(logFile, 'a');
  const child = spawn(cmd, args, { env, stdio: ['ignore', fd, fd] });
  children.add(child);
  child.exited = new Promise((r) => child.on('exit', (code, sig) => {
    children.delete(child);
    r({ code, sig });
  }));
  return child;
}

async function stopChild(child, graceMs = 10_000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const done = await Promise.race([child.exited, sleep(graceMs).then(() => null)]);
  if (!done) {
    child.kill('SIGKILL');
    await child.exited;
  }
}

function tail(file, lines = 30) {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** Polls `url` until it answers 2xx, the child exits, or `deadlineMs` passes. */
async function waitHttp(url, child, logFile, deadlineMs = 180_000) {
  const t0 = Date.now();
  let last = '';
  while (Date.now() - t0 < deadlineMs) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${url}: the server exited (${child.exitCode ?? child.signalCode}):\n${tail(logFile)}`);
    }
    try {
      const res = await fetch(url);
      if (res.ok) return;
      last = `HTTP ${res.status}`;
      // A definite answer (403, 404): waiting longer will not change it.
      if (res.status >= 400 && res.status < 500) throw Object.assign(new Error(`${url}: ${last}:\n${tail(logFile)}`), { fatal: true });
    } catch (e) {
      if (e.fatal) throw e;
      last = e.cause?.code || e.message;
    }
    await sleep(200);
  }
  throw new Error(`${url} did not answer within ${deadlineMs / 1000} s (${last}):\n${tail(logFile)}`);
}

/** The kiln-api binary: --kiln-bin, else $CARGO_TARGET_DIR (or ./target)/{release,debug}/kiln-api. */
export function findKiln(repo, explicit) {
  if (explicit) {
    if (!existsSync(explicit)) throw new Error(`--kiln-bin ${explicit}: no such file`);
    return resolve(explicit);
  }
  const target = process.env.CARGO_TARGET_DIR ? resolve(repo, process.env.CARGO_TARGET_DIR) : join(repo, 'target');
  const found = ['release', 'debug'].map((p) => join(target, p, 'kiln-api')).filter((p) => existsSync(p));
  if (!found.length) {
    throw new Error(
      `no kiln-api under ${target}/{release,debug}: build it first (cargo build --release -p kiln-api --bin kiln-api) or pass --kiln-bin`,
    );
  }
  // Release first (what a deployment runs); report which one was used.
  return found[0];
}

export class Kiln {
  constructor({ bin, dir }) {
    this.bin = bin;
    this.dir = dir;
    this.admin = `bench-admin-${randomBytes(12).toString('hex')}`;
    this.logFile = join(dir, 'kiln.log');
  }

  async start() {
    this.port = await freePort();
    this.base = `http://127.0.0.1:${this.port}`;
    // The content origin (game files, manifests, the loader): where players load games from.
    this.contentPort = await freePort();
    this.content = `http://127.0.0.1:${this.contentPort}`;
    const data = join(this.dir, 'data');
    mkdirSync(data, { recursive: true });
    const env = {
      ...process.env,
      KILN_DATA_DIR: data,
      KILN_BIND: `127.0.0.1:${this.port}`,
      KILN_PUBLIC_URL: this.base,
      KILN_CONTENT_BIND: `127.0.0.1:${this.contentPort}`,
      KILN_CONTENT_URL: this.content,
      KILN_ADMIN_TOKEN: this.admin,
      RUST_LOG: process.env.RUST_LOG || 'info',
    };
    for (const k of ['KILN_CONFIG', 'KILN_DATABASE_URL', 'KILN_S3_BUCKET', 'KILN_STORAGE_DIR', 'KILN_SIGNING_KEY_FILE']) delete env[k];
    this.child = startChild(this.bin, [], { env, logFile: this.logFile });
    try {
      await waitHttp(`${this.base}/readyz`, this.child, this.logFile);
    } catch (e) {
      await this.stop();
      throw e;
    }
    return this;
  }

  async api(method, path, { token, body, type, expect = [200, 201, 202] } = {}) {
    const headers = {};
    if (token) headers.authorization = `Bearer ${token}`;
    if (type) headers['content-type'] = type;
    let payload = body;
    if (body && !type && !(body instanceof Buffer)) {
      headers['content-type'] = 'application/json';
      payload = JSON.stringify(body);
    }
    const res = await fetch(`${this.base}${path}`, { method, headers, body: payload });
    const text = await res.text();
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    if (!expect.includes(res.status)) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text.slice(0, 2000)}`);
    return json ?? text;
  }

  async team() {
    const team = await this.api('POST', '/v1/teams', { token: this.admin, body: { name: `load-bench-${randomBytes(4).toString('hex')}` } });
    const tok = await this.api('POST', `/v1/teams/${team.id}/tokens`, { token: this.admin });
    this.token = tok.token;
    return this.token;
  }

  async keys() {
    const jwks = await this.api('GET', '/v1/keys');
    return jwks.keys;
  }

  /** Uploads a zip (as a team's CI does); returns the upload answer (build_id, status_url). */
  async upload(game, version, zip) {
    return this.api('POST', `/v1/games/${game}/builds?version=${encodeURIComponent(version)}`, {
      token: this.token,
      body: zip,
      type: 'application/zip',
    });
  }

  /** Waits (generous deadline, polling, no fixed sleeps) until an uploaded build is published. */
  async published(game, up, { deadlineMs = 15 * 60_000 } = {}) {
    const t0 = Date.now();
    let status;
    let delay = 100;
    for (;;) {
      status = await this.api('GET', `/v1/builds/${up.build_id}`, { token: this.token });
      if (status.status === 'published' || status.status === 'failed') break;
      if (Date.now() - t0 > deadlineMs) {
        throw new Error(`build ${up.build_id} of ${game} still ${status.status} after ${deadlineMs / 1000} s: ${JSON.stringify(status)}`);
      }
      await sleep(delay);
      delay = Math.min(1000, delay * 1.5);
    }
    const report = await this.api('GET', `/v1/builds/${up.build_id}/report`, { token: this.token });
    if (status.status !== 'published') {
      throw new Error(`build of ${game} failed: ${JSON.stringify(status.error ?? status)}\nreport: ${JSON.stringify(report, null, 1).slice(0, 4000)}`);
    }
    return { build: up.build_id, status, report, ms: Date.now() - t0 };
  }

  async stop() {
    await stopChild(this.child);
  }
}

const MIME = {
  html: 'text/html',
  js: 'text/javascript',
  mjs: 'text/javascript',
  css: 'text/css',
  json: 'application/json',
  png: 'image/png',
  jpg: 'image/jpeg',
  webp: 'image/webp',
  svg: 'image/svg+xml',
  glb: 'model/gltf-binary',
  gltf: 'model/gltf+json',
  wasm: 'application/wasm',
  md: 'text/markdown',
  txt: 'text/plain',
};

/**
 * nginx as a plain game host would run it: gzip (level 6) for text, JSON, SVG, glTF and wasm,
 * `expires 1h`, ETags, keep-alive. Every staged build is under /raw/{game}/.
 */
export class Nginx {
  constructor({ dir, root, probe, bin = process.env.KILN_NGINX || '/usr/sbin/nginx' }) {
    this.probe = probe; // a file under root that must be served once nginx is up
    this.dir = dir;
    this.root = root;
    this.bin = bin;
    this.logFile = join(dir, 'nginx.log');
  }

  config() {
    const types = Object.entries(MIME).map(([ext, t]) => `    ${t} ${ext};`).join('\n');
    const gz = [...new Set(['text/javascript', 'application/javascript', 'text/css', 'application/json', 'image/svg+xml', 'model/gltf-binary', 'model/gltf+json', 'application/wasm', 'text/markdown', 'text/plain'])];
    return `daemon off;
worker_processes 1;
pid ${this.dir}/nginx.pid;
error_log ${this.dir}/error.log warn;
events { worker_connections 512; }
http {
  types {
${types}
  }
  default_type application/octet-stream;
  access_log ${this.dir}/access.log;
  client_body_temp_path ${this.dir}/tmp/body;
  proxy_temp_path ${this.dir}/tmp/proxy;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_timeout 65;
  keepalive_requests 1000;
  gzip on;
  gzip_comp_level 6;
  gzip_min_length 256;
  gzip_vary on;
  gzip_proxied any;
  gzip_types ${gz.join(' ')};
  etag on;
  expires 1h;
  server {
    listen 127.0.0.1:${this.port};
    server_name localhost;
    location /raw/ {
      alias ${this.root}/;
      index index.html;
    }
  }
}
`;
  }

  async start() {
    if (!existsSync(this.bin)) throw new Error(`no nginx at ${this.bin} (apt-get install nginx-light, or set KILN_NGINX)`);
    this.port = await freePort();
    this.base = `http://127.0.0.1:${this.port}`;
    mkdirSync(join(this.dir, 'tmp'), { recursive: true });
    const conf = join(this.dir, 'nginx.conf');
    writeFileSync(conf, this.config());
    // nginx workers run as an unprivileged user when started as root: they must be able to read.
    // (Our scratch folders come from mkdtemp, mode 0700.)
    if (process.getuid && process.getuid() === 0) {
      for (const d of [this.dir, this.root]) {
        if ((statSync(d).mode & 0o005) !== 0o005) chmodSync(d, 0o755);
      }
    }
    this.child = startChild(this.bin, ['-p', this.dir, '-c', conf, '-e', join(this.dir, 'error.log')], { env: process.env, logFile: this.logFile });
    try {
      await waitHttp(`${this.base}/raw/${this.probe}`, this.child, join(this.dir, 'error.log'));
    } catch (e) {
      await this.stop();
      throw e;
    }
    return this;
  }

  async stop() {
    await stopChild(this.child);
  }
}
