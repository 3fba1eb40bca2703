#!/usr/bin/env node
// A stand-in Kiln for working on the dashboard page (api/dashboard/) without a database:
// serves the page's four files like kiln-api does, and made-up but realistic data at
// GET /v1/dashboard/data.
//
//   node api/sdk/test/dashboard-fixture.mjs [--port 8080] [--host 127.0.0.1] [--empty]
//
// Then open the printed URL. Tokens: "test" is an admin token (all games), "team" a team token
// (game "alpha" only; another game answers 403); anything else answers 401. As kiln-api does,
// POST /dashboard/session trades a token for an HttpOnly session cookie (DELETE logs out), and
// the data answers to that cookie or to a bearer token. --empty answers
// with no data at all (empty arrays, null rates), like a fresh installation.
// The data is deterministic per UTC hour, so reloading shows the same numbers.
//
// Not a test itself: under `node --test test/` it only loads (test/dashboard.mjs uses it).

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const DASHBOARD_DIR = process.env.KILN_DASHBOARD_DIR ?? path.join(here, '..', '..', 'dashboard');
export const ADMIN_TOKEN = 'test';
export const TEAM_TOKEN = 'team';

// What kiln-api serves, and how (the page's files are served verbatim).
const FILES = {
  '/dashboard': ['index.html', 'text/html; charset=utf-8'],
  '/dashboard/': ['index.html', 'text/html; charset=utf-8'],
  '/dashboard/dashboard.css': ['dashboard.css', 'text/css; charset=utf-8'],
  '/dashboard/charts.js': ['charts.js', 'text/javascript; charset=utf-8'],
  '/dashboard/dashboard.js': ['dashboard.js', 'text/javascript; charset=utf-8'],
};
export const PAGE_HEADERS = {
  'cache-control': 'no-cache',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

const HOUR = 3600e3;
const GAMES = {
  alpha: { engine: 'three', version: '0.150.1' },
  beta: { engine: 'phaser', version: '3.70.0' },
  gamma: { engine: 'three', version: '0.160.0' },
};
const CLASSES = {
  // share of traffic, base hit rate, decode speed factor
  desktop: [0.30, 0.91, 1.0],
  'ios-high': [0.18, 0.88, 1.3],
  'ios-low': [0.05, 0.74, 2.6],
  'android-high': [0.17, 0.84, 1.6],
  'android-mid': [0.17, 0.72, 2.4],
  'android-low': [0.13, 0.58, 3.8],
};
const VARIANTS = { original: 1.0, meshopt: 0.55, quantized: 0.35 };
const MISS_REASONS = [['cold', 0.58], ['evicted', 0.2], ['version_mismatch', 0.11], ['timeout', 0.07], ['integrity_failed', 0.04]];
const STAGES = [['unpack', 0.4, 1.8], ['inventory', 0.9, 2.6], ['encode', 14.2, 48.5], ['sign', 0.05, 0.12], ['publish', 2.1, 7.4]];
const FAILURES = [
  ['unpack', 'package is not a zip archive (bad central directory)'],
  ['inventory', 'index.html not found at the package root'],
  ['encode', 'models/city.glb: accessor 14 points outside its buffer view'],
  ['publish', 'object store: PUT lib/ab/… answered 503 Slow Down'],
];

// Deterministic noise in [0, 1) for a list of keys.
function noise(...keys) {
  let h = 2166136261;
  for (const c of keys.join('|')) h = Math.imul(h ^ c.charCodeAt(0), 16777619);
  h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d);
  h = Math.imul(h ^ (h >>> 12), 0x297a2d39);
  return ((h ^ (h >>> 15)) >>> 0) / 4294967296;
}
const round1 = (v) => Math.round(v * 10) / 10;
const iso = (t) => new Date(t).toISOString().replace(/\.\d{3}Z$/, 'Z');
const rate = (a, b) => (b > 0 ? a / b : null);

// Empty: what a fresh installation (or a range without traffic) answers.
export function emptyData({ games = [], game = null, from, to }) {
  return {
    games, game, from, to,
    prewarm: { totals: { events: 0, hits: 0, misses: 0, fallbacks: 0, errors: 0, hit_rate: null }, hourly: [], misses_by_reason: [], rows: [] },
    decode: { rows: [], hourly: [], choices: [] },
    library: { totals: { entries: 0, bytes_stored: 0, bytes_saved: 0 }, entries: [] },
    pipeline: {
      queue: { depth: 0, oldest_age_seconds: null },
      builds_by_status: { queued: 0, processing: 0, published: 0, failed: 0 },
      hourly: [], stages: [], recent_failures: [],
      images: { builds: 0, bytes_before: 0, bytes_after: 0, bytes_saved: 0 },
    },
  };
}

export function fixtureData({ games, game = null, from, to }) {
  const fromMs = Date.parse(from);
  const toMs = Date.parse(to);
  const scope = game ? [game] : games;
  const hours = [];
  for (let h = Math.floor(fromMs / HOUR) * HOUR; h < toMs && hours.length < 24 * 31; h += HOUR) hours.push(h);
  const d = emptyData({ games, game, from, to });

  // Pre-warm: events per game, class and hour, with a day/night cycle.
  const cells = new Map(); // `${hour}|${class}` -> {events, hits}
  const rows = new Map(); // `${game}|${class}` -> {events, hits, ms: []}
  const t = d.prewarm.totals;
  for (const h of hours) {
    const daylight = 0.55 + 0.45 * Math.sin(((new Date(h).getUTCHours() - 8) / 24) * 2 * Math.PI);
    for (const g of scope) {
      if (!GAMES[g]) continue;
      for (const [cls, [share, base]] of Object.entries(CLASSES)) {
        const events = Math.round(60 * share * daylight * (0.6 + 0.8 * noise('e', g, cls, h)) * (g === 'beta' ? 0.5 : 1));
        const hitRate = Math.min(1, Math.max(0, base + (noise('r', g, cls, h) - 0.5) * 0.16));
        const hits = Math.round(events * hitRate);
        const fallbacks = events - hits > 0 && noise('f', g, cls, h) < 0.12 ? 1 : 0;
        const errors = noise('x', g, cls, h) < 0.02 && events - hits - fallbacks > 0 ? 1 : 0;
        Object.assign(t, { events: t.events + events, hits: t.hits + hits, fallbacks: t.fallbacks + fallbacks, errors: t.errors + errors });
        t.misses += events - hits - fallbacks - errors;
        const key = `${h}|${cls}`;
        const cell = cells.get(key) ?? { events: 0, hits: 0 };
        cell.events += events;
        cell.hits += hits;
        cells.set(key, cell);
        const rk = `${g}|${cls}`;
        const row = rows.get(rk) ?? { events: 0, hits: 0 };
        row.events += events;
        row.hits += hits;
        rows.set(rk, row);
      }
    }
  }
  t.hit_rate = rate(t.hits, t.events);
  for (const [key, c] of cells) {
    const [h, cls] = key.split('|');
    // ios-low is sparse: hours without events still come back, with a null rate.
    if (c.events === 0 && noise('gap', h) < 0.5) continue;
    d.prewarm.hourly.push({ hour: iso(Number(h)), device_class: cls, events: c.events, hits: c.hits, hit_rate: rate(c.hits, c.events) });
  }
  let left = t.misses;
  d.prewarm.misses_by_reason = MISS_REASONS.map(([reason, share], i) => {
    const count = i === MISS_REASONS.length - 1 ? left : Math.round(t.misses * share);
    left -= count;
    return { reason, count };
  }).filter((r) => r.count > 0);
  for (const [key, r] of rows) {
    const [g, cls] = key.split('|');
    const speed = CLASSES[cls][2];
    d.prewarm.rows.push({
      game: g, engine: GAMES[g].engine, version: GAMES[g].version, device_class: cls,
      events: r.events, hits: r.hits, hit_rate: rate(r.hits, r.events),
      p50_ms: r.events ? round1(9 * speed * (0.9 + 0.2 * noise('p50', key))) : null,
      p90_ms: r.events ? round1(34 * speed * (0.9 + 0.3 * noise('p90', key))) : null,
    });
  }

  // Decode: per class and variant; "original" on ios-low never ran (nulls).
  if (hours.length && scope.some((g) => GAMES[g])) {
    const share = scope.filter((g) => GAMES[g]).length / Object.keys(GAMES).length;
    for (const [cls, [trafficShare, , speed]] of Object.entries(CLASSES)) {
      for (const [variant, factor] of Object.entries(VARIANTS)) {
        const used = variant === 'meshopt' ? 0.55 : variant === 'quantized' ? (speed > 2 ? 0.4 : 0.25) : 0.1;
        const perHour = 40 * trafficShare * used * share;
        const count = cls === 'ios-low' && variant === 'original' ? 0 : Math.max(1, Math.round(perHour * hours.length));
        const p50 = 70 * speed * factor;
        const fallbackRate = variant === 'quantized' && cls === 'android-low' ? 0.062 : 0.004 + 0.01 * noise('fb', cls, variant);
        const fallbacks = Math.round(count * fallbackRate);
        d.decode.rows.push({
          device_class: cls, variant, count,
          p50_ms: count ? round1(p50) : null, p90_ms: count ? round1(p50 * 2.4) : null, p99_ms: count ? round1(p50 * 4.7) : null,
          fallbacks, fallback_rate: count ? fallbacks / count : null,
        });
        if (!count) continue;
        for (const h of hours) {
          const n = Math.round(perHour * (0.5 + noise('dc', cls, variant, h)));
          if (n === 0) continue;
          d.decode.hourly.push({ hour: iso(h), device_class: cls, variant, count: n, p90_ms: round1(p50 * 2.4 * (0.8 + 0.4 * noise('dp', cls, variant, h))) });
        }
      }
    }
  }
  for (const g of scope) {
    if (!GAMES[g]) continue;
    for (const asset of ['models/fox.glb', 'models/city.glb', 'models/hero-rig.glb']) {
      for (const cls of Object.keys(CLASSES)) {
        const speed = CLASSES[cls][2];
        // Quantized files are bigger: only worth it where decoding is slow.
        const q = Math.round(70 * speed * (speed > 1.5 ? VARIANTS.quantized : 0.75) * (0.9 + 0.2 * noise('cq', g, asset, cls)));
        const m = Math.round(70 * speed * VARIANTS.meshopt * (0.9 + 0.2 * noise('cm', g, asset, cls)));
        const measured = noise('cx', g, asset, cls) < 0.85;
        const slow = speed > 2.5;
        const variant = measured ? (q < m ? 'quantized' : 'meshopt') : slow ? 'quantized' : 'meshopt';
        const [best, other] = variant === 'quantized' ? [['quantized', q], ['meshopt', m]] : [['meshopt', m], ['quantized', q]];
        const n = 20 + Math.floor(noise('cn', g, asset, cls) * 400);
        d.decode.choices.push({
          game: g, asset, device_class: cls, variant,
          reason: measured ? 'measured' : slow ? 'slow_class' : 'default',
          detail: measured
            ? `on ${cls}: ${best[0]} ready in ${best[1]} ms (${Math.round(best[1] * 0.3)} ms transfer + p90 decode ${Math.round(best[1] * 0.7)} ms over ${n} decodes) vs ${other[0]} ${other[1]} ms`
            : `${slow ? 'slow class default' : 'default'}: too few decodes measured on ${cls} (meshopt ${n % 20}, quantized ${n % 7}; 20 per variant needed for two variants)`,
        });
      }
    }
  }

  // Library: the current state, whatever the range.
  // As kiln-api computes them: bytes saved = hits × size, ROI = bytes saved ÷ size, low below 10.
  const LIB = [
    ['three', '0.150.1', 603_412, ['alpha'], 3, 2, 1840, 212],
    ['three', '0.160.0', 668_904, ['gamma'], 2, 2, 1210, 301],
    ['phaser', '3.70.0', 1_172_306, ['beta'], 4, 1, 655, 160],
    ['three', '0.149.0', 598_771, ['alpha'], 2, 0, 6, 4],
    ['pixi', '7.3.2', 465_120, ['gamma'], 1, 0, 0, 9],
  ];
  for (const [engine, version, size, usedBy, builds, live, hits, misses] of LIB) {
    if (!usedBy.some((g) => scope.includes(g))) continue;
    const sha256 = [...Array(64)].map((_, i) => '0123456789abcdef'[Math.floor(noise('sha', engine, version, i) * 16)]).join('');
    const roi = hits;
    d.library.entries.push({
      sha256, engine, version, size, games: usedBy.length, builds, live_builds: live, hits, misses,
      bytes_saved: hits * size, roi, low_roi: roi < 10,
    });
  }
  d.library.totals = {
    entries: d.library.entries.length,
    bytes_stored: d.library.entries.reduce((a, e) => a + e.size, 0),
    bytes_saved: d.library.entries.reduce((a, e) => a + e.bytes_saved, 0),
  };

  // Pipeline: sparse builds, a few failures.
  const pl = d.pipeline;
  const stageRuns = Object.fromEntries(STAGES.map(([s]) => [s, { succeeded: 0, failed: 0 }]));
  for (const h of hours) {
    let published = 0;
    let failed = 0;
    for (const g of scope) {
      if (!GAMES[g]) continue;
      published += noise('pub', g, h) < 0.35 ? 1 + Math.floor(noise('pub2', g, h) * 2) : 0;
      if (noise('fail', g, h) < 0.05) {
        failed += 1;
        const [stage, error] = FAILURES[Math.floor(noise('which', g, h) * FAILURES.length)];
        pl.recent_failures.push({
          build_id: [...Array(4)].map((_, i) => Math.floor(noise('id', g, h, i) * 0xffffffff).toString(16).padStart(8, '0')).join('-'),
          game: g, version: `1.${Math.floor(noise('v', g, h) * 9)}.${Math.floor(noise('v2', g, h) * 20)}`, stage, error,
          at: iso(h + Math.floor(noise('at', g, h) * HOUR)),
        });
        for (const [s] of STAGES) {
          if (s === stage) { stageRuns[s].failed += 1; break; }
          stageRuns[s].succeeded += 1;
        }
      }
    }
    for (const [s] of STAGES) stageRuns[s].succeeded += published;
    if (published || failed) pl.hourly.push({ hour: iso(h), published, failed });
    pl.builds_by_status.published += published;
    pl.builds_by_status.failed += failed;
    // The images stage: each published build about 1.2 MB of images, 38 % saved.
    pl.images.builds += published;
    pl.images.bytes_before += published * 1_200_000;
    pl.images.bytes_after += published * 744_000;
  }
  pl.images.bytes_saved = pl.images.bytes_before - pl.images.bytes_after;
  pl.recent_failures = pl.recent_failures.sort((a, b) => b.at.localeCompare(a.at)).slice(0, 20);
  if (pl.hourly.length) {
    pl.queue = { depth: 2, oldest_age_seconds: 95 };
    pl.builds_by_status.queued = 2;
    pl.builds_by_status.processing = 1;
  }
  pl.stages = STAGES.map(([stage, p50, p90]) => {
    const runs = stageRuns[stage];
    const ran = runs.succeeded + runs.failed > 0;
    return { stage, ...runs, p50_seconds: ran ? p50 : null, p90_seconds: ran ? p90 : null };
  }).filter((s) => s.succeeded + s.failed > 0);
  return d;
}

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify(body));
}

export async function startDashboardFixture({ port = 0, host = '127.0.0.1', empty = false } = {}) {
  const requests = [];
  const responses = [];
  const sessions = new Map(); // session id -> token
  const cookieOf = (req) => /(?:^|;\s*)kiln_session=([^;]+)/.exec(req.headers.cookie ?? '')?.[1] ?? null;
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://fixture');
    const session = sessions.get(cookieOf(req)) ?? null;
    requests.push({ method: req.method, path: url.pathname + url.search, authorization: req.headers.authorization ?? null, session });
    if (url.pathname === '/dashboard/session' && req.method === 'POST') {
      let text = '';
      for await (const chunk of req) text += chunk;
      let token = null;
      try { token = JSON.parse(text).token; } catch { /* below */ }
      if (token !== ADMIN_TOKEN && token !== TEAM_TOKEN) return json(res, 401, { error: 'unauthorized', message: 'unknown token' });
      const id = Math.random().toString(36).slice(2) + Date.now().toString(36);
      sessions.set(id, token);
      res.setHeader('set-cookie', `kiln_session=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=43200`);
      return json(res, 200, { kind: token === ADMIN_TOKEN ? 'admin' : 'team', expires_in: 43200 });
    }
    if (url.pathname === '/dashboard/session' && req.method === 'DELETE') {
      sessions.delete(cookieOf(req));
      res.writeHead(204, { 'set-cookie': 'kiln_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0' });
      return res.end();
    }
    const file = FILES[url.pathname];
    if (file && (req.method === 'GET' || req.method === 'HEAD')) {
      let body;
      try {
        body = fs.readFileSync(path.join(DASHBOARD_DIR, file[0]));
      } catch (e) {
        return json(res, 500, { error: 'internal', message: `cannot read ${file[0]}: ${e.message}` });
      }
      res.writeHead(200, { 'content-type': file[1], ...PAGE_HEADERS });
      return res.end(req.method === 'HEAD' ? undefined : body);
    }
    if (url.pathname === '/v1/dashboard/data' && req.method === 'GET') {
      const auth = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
      const token = auth?.[1] ?? session;
      if (token !== ADMIN_TOKEN && token !== TEAM_TOKEN) {
        return json(res, 401, { error: 'unauthorized', message: auth ? 'unknown token' : 'missing bearer token or session' });
      }
      const from = url.searchParams.get('from') ?? '';
      const to = url.searchParams.get('to') ?? '';
      const game = url.searchParams.get('game') || null;
      if (Number.isNaN(Date.parse(from)) || Number.isNaN(Date.parse(to)) || !/Z|[+-]\d\d:\d\d$/.test(from)) {
        return json(res, 400, { error: 'bad_request', message: '`from` and `to` must be RFC 3339 timestamps' });
      }
      if (Date.parse(to) <= Date.parse(from) || Date.parse(to) - Date.parse(from) > 31 * 24 * HOUR) {
        return json(res, 400, { error: 'bad_request', message: '`to` must be after `from`, at most 31 days later' });
      }
      const games = token === ADMIN_TOKEN ? Object.keys(GAMES) : ['alpha'];
      if (game && !games.includes(game)) {
        return json(res, 403, { error: 'forbidden', message: `game ${game} is not one of this token's games` });
      }
      const body = empty ? emptyData({ from, to, game }) : fixtureData({ games, game, from, to });
      responses.push(body);
      return json(res, 200, body);
    }
    return json(res, 404, { error: 'not_found', message: `no route for ${req.method} ${url.pathname}` });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const origin = `http://${host.includes(':') ? `[${host}]` : host}:${server.address().port}`;
  return {
    origin,
    url: `${origin}/dashboard`,
    requests,
    responses,
    close: () => new Promise((done) => { server.closeAllConnections?.(); server.close(() => done()); }),
  };
}

async function main(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--port') opts.port = Number(argv[++i]);
    else if (argv[i] === '--host') opts.host = argv[++i];
    else if (argv[i] === '--empty') opts.empty = true;
    else {
      process.stderr.write(`dashboard-fixture: unknown argument ${argv[i]}\nusage: node test/dashboard-fixture.mjs [--port N] [--host H] [--empty]\n`);
      process.exit(2);
    }
  }
  const fx = await startDashboardFixture(opts);
  process.stdout.write(`dashboard fixture on ${fx.origin}${opts.empty ? ' (empty data)' : ''}\n`
    + `  admin: ${fx.url}#token=${ADMIN_TOKEN}\n  team:  ${fx.url}#token=${TEAM_TOKEN}\n`);
}

const isMain = process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1]);
if (isMain && !process.env.NODE_TEST_CONTEXT) await main(process.argv.slice(2));
