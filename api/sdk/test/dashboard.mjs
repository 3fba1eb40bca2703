#!/usr/bin/env node
// Checks Kiln's dashboard page (/dashboard) in headless Chromium.
//
//   node api/sdk/test/dashboard.mjs --url http://127.0.0.1:PORT/dashboard --token TOKEN
//        [--game G] [--expect-hit-rate "75.0 %"] [--screenshot out.png] [--allow-empty]
//        [--timeout-ms 20000]
//
// Opens <url>#token=TOKEN[&game=G] at 1400 px wide and waits for body[data-state=ready]
// (fails at once on "error", with the page's #dashboard-error text). Then checks:
//   - no console errors, no page errors, no request to another origin than the page's;
//   - the page traded the token for a session (POST /dashboard/session; an HttpOnly,
//     SameSite=Strict cookie) and the data requests carried that cookie, no token (and game=G);
//     the token left the visible URL and is nowhere in localStorage;
//   - #prewarm-hit-rate reads like "81.3 %" (or "–"), and equals --expect-hit-rate if given;
//   - each view (prewarm, decode, library, pipeline) has a table and a chart <svg> with drawn
//     marks; with --allow-empty, a "no data" placeholder will do instead (an empty installation);
//   - choosing another range in the range select fetches again, for that range, and renders.
// --screenshot writes a full-page PNG of the page as first rendered.
// Prints one JSON line ({"ok": true, "hit_rate_text": ..., "views": {...}, "requests": [...], ...})
// and exits 0; on a failed check, prints the line with "ok": false and "failures", says why on
// stderr, and exits 1. Bad usage exits 2. Chromium: /usr/bin/chromium, or KILN_CHROMIUM.
//
// Run with no arguments by `node --test api/sdk/test/`, it tests itself against
// dashboard-fixture.mjs (a stand-in Kiln serving api/dashboard/ and fixture data).

import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

import { launchChromium, runSelf } from './support.mjs';

const VIEWS = ['prewarm', 'decode', 'library', 'pipeline'];
const RANGE_HOURS = { '1h': 1, '6h': 6, '24h': 24, '7d': 168, '30d': 720 };
const DATA_PATH = '/v1/dashboard/data';

export async function checkDashboard({ url, token, game = null, expectHitRate = null, screenshot = null, allowEmpty = false, timeoutMs = 20000 }) {
  const failures = [];
  const fail = (msg) => failures.push(msg);
  const pageUrl = new URL(url);
  const origin = pageUrl.origin;
  const fragment = new URLSearchParams({ token });
  if (game) fragment.set('game', game);
  pageUrl.hash = fragment.toString();

  const browser = await launchChromium();
  const seen = [];
  const errors = [];
  const out = { url, ok: false };
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    context.on('request', (r) => seen.push(r));
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
    page.on('pageerror', (e) => errors.push(`page error: ${String(e?.message ?? e)}`));

    const settled = async (what) => {
      try {
        await page.waitForFunction(() => ['ready', 'error', 'token'].includes(document.body?.dataset.state), null, { timeout: timeoutMs, polling: 50 });
      } catch {
        throw new Error(`${what}: the page did not finish within ${timeoutMs} ms (body[data-state] is ${JSON.stringify(await page.evaluate(() => document.body?.dataset.state).catch(() => null))})`);
      }
      const s = await page.evaluate(() => ({ state: document.body.dataset.state, error: document.getElementById('dashboard-error')?.textContent?.trim() ?? '' }));
      if (s.state === 'error') throw new Error(`${what}: the page shows an error: ${s.error || '(no message)'}`);
      if (s.state === 'token') throw new Error(`${what}: the page asks for a token instead of showing data`);
    };

    const response = await page.goto(pageUrl.toString(), { waitUntil: 'domcontentloaded', timeout: timeoutMs });
    if (!response || !response.ok()) throw new Error(`GET ${url} answered ${response ? response.status() : 'nothing'}`);
    await settled('first load');

    const first = await inspect(page);
    out.hit_rate_text = first.hitRate;
    out.views = first.views;
    out.range = first.range;
    if (first.hitRate == null) fail('no #prewarm-hit-rate element');
    else if (!/^(\d{1,3}\.\d %|–)$/.test(first.hitRate)) fail(`#prewarm-hit-rate reads ${JSON.stringify(first.hitRate)}, not like "81.3 %"`);
    out.image_bytes_saved_text = first.imageBytesSaved;
    if (first.imageBytesSaved == null) fail('no #pipeline-image-bytes-saved element');
    if (expectHitRate != null && first.hitRate !== expectHitRate) fail(`#prewarm-hit-rate reads ${JSON.stringify(first.hitRate)}, expected ${JSON.stringify(expectHitRate)}`);
    for (const v of VIEWS) {
      const view = first.views[v];
      if (!view) { fail(`no [data-view="${v}"] element`); continue; }
      if (view.tables < 1) fail(`view ${v} has no table[data-table]`);
      if (view.empty_tables < view.tables && view.rows < 1) fail(`view ${v}: tables without rows`);
      if (view.charts < 1) fail(`view ${v} has no .chart[data-chart]`);
      if (allowEmpty) {
        if (view.svg_charts + view.placeholders < view.charts) fail(`view ${v}: a chart shows neither an <svg> nor a "no data" placeholder`);
      } else if (view.charts_with_marks < 1) {
        fail(`view ${v} has no chart <svg> with drawn marks (path/rect)`);
      }
    }
    if (page.url().includes('token=')) fail(`the token is still in the visible URL: ${page.url()}`);
    const stored = await page.evaluate(() => Object.keys(localStorage).map((k) => `${k}=${localStorage.getItem(k)}`));
    if (stored.some((e) => e.includes(token))) fail(`the token is kept in localStorage: ${stored.join(', ')}`);
    if (await page.evaluate(() => document.cookie.includes('kiln_session'))) fail('a script can read the session cookie (not HttpOnly)');
    const logins = seen.filter((r) => new URL(r.url()).origin === origin && new URL(r.url()).pathname === '/dashboard/session' && r.method() === 'POST');
    if (logins.length < 1) fail('no POST /dashboard/session (login)');
    else if (JSON.parse(logins[0].postData() ?? '{}').token !== token) fail('the login did not send the token');
    const cookie = (await context.cookies()).find((c) => c.name === 'kiln_session');
    if (!cookie) fail('no kiln_session cookie after the login');
    else if (!cookie.httpOnly || cookie.sameSite !== 'Strict' || cookie.path !== '/') fail(`the session cookie is not HttpOnly; SameSite=Strict; Path=/: ${JSON.stringify(cookie)}`);
    const firstData = seen.filter((r) => isData(r, origin));
    if (firstData.length < 1) fail(`no request to ${DATA_PATH}`);
    else await checkDataRequest(firstData.at(-1), { token, game, hours: RANGE_HOURS[first.range], fail });

    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });

    // Another range: a new request for that window, and a page that renders it.
    const next = first.range === '7d' ? '24h' : '7d';
    const before = seen.filter((r) => isData(r, origin)).length;
    await page.selectOption('#filter-range', next);
    await page.waitForFunction(() => document.body.dataset.state === 'loading' || document.body.dataset.state === 'ready', null, { timeout: timeoutMs });
    const deadline = Date.now() + timeoutMs;
    while (seen.filter((r) => isData(r, origin)).length === before && Date.now() < deadline) await page.waitForTimeout(25);
    const refetch = seen.filter((r) => isData(r, origin)).slice(before);
    if (refetch.length < 1) {
      fail(`choosing range ${next} did not fetch ${DATA_PATH} again`);
    } else {
      await settled(`after choosing range ${next}`);
      const q = new URL(refetch.at(-1).url()).searchParams;
      out.refetch = { range: next, from: q.get('from'), to: q.get('to') };
      await checkDataRequest(refetch.at(-1), { token, game, hours: RANGE_HOURS[next], fail });
      const after = await inspect(page);
      if (after.range !== next) fail(`the range select shows ${after.range} after choosing ${next}`);
      if (!page.url().includes(`range=${next}`)) fail(`the URL fragment does not show range=${next}: ${page.url()}`);
      if (page.url().includes('token=')) fail('the token came back into the URL');
    }
    await page.waitForTimeout(100);
    await context.close();
  } catch (e) {
    fail(String(e?.message ?? e));
  } finally {
    await browser.close().catch(() => {});
  }

  const foreign = seen.map((r) => r.url()).filter((u) => !/^(data|blob|about):/.test(u) && new URL(u).origin !== origin);
  for (const u of [...new Set(foreign)]) fail(`request to another origin: ${u}`);
  for (const e of errors) fail(e);
  out.requests = seen.map((r) => {
    const u = new URL(r.url());
    return u.origin === origin ? `${r.method()} ${u.pathname}${u.search}` : `${r.method()} ${r.url()}`;
  });
  out.console_errors = errors;
  out.ok = failures.length === 0;
  if (failures.length) out.failures = failures;
  return out;
}

function isData(request, origin) {
  const u = new URL(request.url());
  return u.origin === origin && u.pathname === DATA_PATH;
}

async function checkDataRequest(request, { token, game, hours, fail }) {
  const headers = await request.allHeaders();
  if (headers.authorization) fail(`${DATA_PATH} was requested with an Authorization header: the page keeps a token`);
  if (!/(^|;\s*)kiln_session=/.test(headers.cookie ?? '')) fail(`${DATA_PATH} was requested without the session cookie`);
  const q = new URL(request.url()).searchParams;
  if ((q.get('game') ?? '') !== (game ?? '')) fail(`${DATA_PATH} asked for game=${JSON.stringify(q.get('game'))}, expected ${JSON.stringify(game ?? '')}`);
  const from = Date.parse(q.get('from') ?? '');
  const to = Date.parse(q.get('to') ?? '');
  const rfc3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;
  if (!rfc3339.test(q.get('from') ?? '') || !rfc3339.test(q.get('to') ?? '')) fail(`${DATA_PATH}: from/to are not RFC 3339: ${q.get('from')} .. ${q.get('to')}`);
  else if (hours && Math.abs(to - from - hours * 3600e3) > 60e3) fail(`${DATA_PATH}: from..to spans ${(to - from) / 3600e3} h, expected ${hours} h`);
}

// What the page shows: the hit rate tile, the range, and per view its charts and tables.
function inspect(page) {
  return page.evaluate((views) => {
    const result = {
      hitRate: document.getElementById('prewarm-hit-rate')?.textContent.trim() ?? null,
      imageBytesSaved: document.getElementById('pipeline-image-bytes-saved')?.textContent.trim() ?? null,
      range: document.getElementById('filter-range')?.value ?? null, views: {},
    };
    for (const name of views) {
      const view = document.querySelector(`[data-view="${name}"]`);
      if (!view) continue;
      const charts = [...view.querySelectorAll('.chart[data-chart]')];
      const marks = (c) => [...c.querySelectorAll('svg path.mark, svg rect.mark')]
        .filter((m) => (m.tagName === 'path' ? (m.getAttribute('d') || '').length > 1 : Number(m.getAttribute('width')) > 0)).length;
      const tables = [...view.querySelectorAll('table[data-table]')];
      result.views[name] = {
        charts: charts.length,
        svg_charts: charts.filter((c) => c.querySelector('svg')).length,
        charts_with_marks: charts.filter((c) => marks(c) > 0).length,
        marks: charts.reduce((a, c) => a + marks(c), 0),
        placeholders: charts.filter((c) => !c.querySelector('svg') && c.querySelector('.empty')).length,
        tables: tables.length,
        rows: tables.reduce((a, t) => a + t.querySelectorAll('tbody tr:not(.empty-row)').length, 0),
        empty_tables: tables.filter((t) => t.querySelector('tbody tr.empty-row')).length,
      };
    }
    return result;
  }, VIEWS);
}

function usage(message) {
  if (message) process.stderr.write(`dashboard: ${message}\n`);
  process.stderr.write('usage: node api/sdk/test/dashboard.mjs --url http://HOST:PORT/dashboard --token TOKEN [--game G] [--expect-hit-rate "75.0 %"] [--screenshot out.png] [--allow-empty] [--timeout-ms N]\n');
  process.exit(2);
}

async function main(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    if (a === '--url') opts.url = value();
    else if (a === '--token') opts.token = value();
    else if (a === '--game') opts.game = value();
    else if (a === '--expect-hit-rate') opts.expectHitRate = value();
    else if (a === '--screenshot') opts.screenshot = value();
    else if (a === '--allow-empty') opts.allowEmpty = true;
    else if (a === '--timeout-ms') opts.timeoutMs = Number(value());
    else usage(`unknown argument ${a}`);
  }
  if (!opts.url) usage('--url is required');
  if (!opts.token) usage('--token is required');
  try { new URL(opts.url); } catch { usage(`--url ${opts.url} is not a URL`); }
  if (opts.timeoutMs !== undefined && !(opts.timeoutMs > 0)) usage('--timeout-ms must be a positive number');
  const result = await checkDashboard(opts);
  process.stdout.write(`${JSON.stringify(result)}\n`);
  for (const f of result.failures ?? []) process.stderr.write(`dashboard: FAILED: ${f}\n`);
  process.exit(result.ok ? 0 : 1);
}

async function selfTest() {
  const assert = (await import('node:assert/strict')).default;
  const os = await import('node:os');
  const path = await import('node:path');
  const { test } = await import('node:test');
  const { startDashboardFixture, ADMIN_TOKEN, TEAM_TOKEN } = await import('./dashboard-fixture.mjs');

  // The fixture answering the child lives in this process.
  const cli = (args) => runSelf(fileURLToPath(import.meta.url), args);
  const pct = (r) => (r == null ? '–' : `${(r * 100).toFixed(1)} %`);

  test('dashboard.mjs passes the page against fixture data, and takes a screenshot', async () => {
    const fx = await startDashboardFixture();
    try {
      const shot = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-dashboard-')), 'dashboard.png');
      const run = await cli(['--url', fx.url, '--token', ADMIN_TOKEN, '--screenshot', shot]);
      assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
      assert.equal(run.json.ok, true);
      assert.equal(run.json.hit_rate_text, pct(fx.responses[0].prewarm.totals.hit_rate));
      for (const v of VIEWS) assert.ok(run.json.views[v].marks > 0 && run.json.views[v].rows > 0, v);
      assert.equal(run.json.refetch.range, '7d');
      assert.ok(fx.requests.some((r) => r.path.startsWith(`${DATA_PATH}?`) && r.session === ADMIN_TOKEN && !r.authorization));
      assert.deepEqual(fs.readFileSync(shot).subarray(1, 4).toString(), 'PNG');
    } finally {
      await fx.close();
    }
  });

  test('dashboard.mjs fails on a wrong hit rate, and asks for the game given', async () => {
    const fx = await startDashboardFixture();
    try {
      const run = await cli(['--url', fx.url, '--token', TEAM_TOKEN, '--game', 'alpha', '--expect-hit-rate', '0.0 %']);
      assert.equal(run.status, 1, run.stdout);
      assert.match(run.stderr, /#prewarm-hit-rate reads "\d+\.\d %", expected "0\.0 %"/);
      assert.equal(run.json.failures.length, 1, run.stderr);
      assert.ok(fx.requests.some((r) => r.path.includes('game=alpha')));
    } finally {
      await fx.close();
    }
  });

  test('dashboard.mjs passes an empty installation with --allow-empty; the page shows placeholders', async () => {
    const fx = await startDashboardFixture({ empty: true });
    try {
      const run = await cli(['--url', fx.url, '--token', ADMIN_TOKEN, '--allow-empty']);
      assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
      assert.equal(run.json.hit_rate_text, '–');
      for (const v of VIEWS) assert.equal(run.json.views[v].placeholders, run.json.views[v].charts, v);
    } finally {
      await fx.close();
    }
  });

  test('dashboard.mjs reports a refused token', async () => {
    const fx = await startDashboardFixture();
    try {
      const run = await cli(['--url', fx.url, '--token', 'wrong', '--timeout-ms', '5000']);
      assert.equal(run.status, 1, run.stdout);
      assert.match(run.stderr, /Token refused \(401\)/);
    } finally {
      await fx.close();
    }
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  if (process.argv.length <= 2 && process.env.NODE_TEST_CONTEXT) await selfTest();
  else await main(process.argv.slice(2));
}
