// Browser tests of api/sdk/kiln-loader.js in real headless Chromium: node --test api/sdk/test/

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import vm from 'node:vm';

import { CONTAINER_PAGE, LOADER_PATH, gamePage, launchChromium, makeEngine, publish, startServer, tampered } from './support.mjs';

let browser;
let srv;
const contexts = [];

before(async () => {
  [browser, srv] = await Promise.all([launchChromium(), startServer()]);
});
after(async () => {
  await browser?.close();
  await srv?.close();
});

async function newContext(init) {
  const ctx = await browser.newContext();
  if (init) await ctx.addInitScript(init);
  contexts.push(ctx);
  return ctx;
}

// Opens a page, waits for kiln.ready when the page boots, and collects its console errors.
async function open(ctx, url, { boot = true } = {}) {
  const page = await ctx.newPage();
  page.errors = [];
  page.on('console', (m) => { if (m.type() === 'error') page.errors.push(m.text()); });
  page.on('pageerror', (e) => page.errors.push(String(e)));
  await page.goto(url);
  if (boot) page.summary = await page.evaluate(() => kiln.ready);
  return page;
}

function state(page) {
  return page.evaluate(() => ({
    events: kiln.events,
    executed: globalThis.__executed ?? 0,
    ran: globalThis.__ran ?? [],
    tampered: globalThis.__tampered ?? false,
    engine: globalThis.FAKEENGINE ?? null,
    started: globalThis.gameStarted ?? null,
    order: globalThis.order ?? [],
  }));
}

function engineEvents(events) {
  return events.filter((e) => e.type === 'preheat');
}

function count(path) {
  return srv.requests.filter((r) => r.path === path).length;
}

const libPath = (d) => new URL(d.url).pathname;

// A game at /g/<id>/ with one engine, its deferred game.js, and a boot config as the rewrite writes it.
function game(id, engine, { config = {}, deferred, publishOpts = {}, page = 'index.html', bodyAttrs } = {}) {
  const gameDir = `/g/${id}`;
  const d = publish(srv, id, engine, { gameDir, ...publishOpts });
  srv.set(`${gameDir}/game.js`, `
    window.gameStarted = typeof FAKEENGINE === 'undefined' ? 'no engine' : FAKEENGINE.version;
    kiln.engine(${JSON.stringify(engine.name)}).then((e) => { window.viaApi = e && e.version; }, (e) => { window.viaApi = 'rejected:' + e.reason; });
  `);
  const cfg = { game: id, manifest: `${srv.origin}/v1/games/${id}/manifest`, telemetry: `${srv.origin}/v1/telemetry`, keys: srv.trusted, engines: [d], ...config };
  const url = srv.set(`${gameDir}/${page}`, gamePage(cfg, deferred ?? '<script type="text/kiln-deferred" src="game.js"></script>', { bodyAttrs }));
  return { d, url, gameDir };
}

function manifestFor(gameId, engines, { sequence = 7, expires = new Date(Date.now() + 86400e3).toISOString() } = {}) {
  return { schema: 1, game: gameId, version: '1.0.0', build_id: `build-${gameId}-${sequence}`, sequence, expires, files: [], engines };
}

async function assertBeaconsMatch(gameId, pages) {
  const expected = [];
  for (const p of pages) expected.push(...(await p.evaluate(() => kiln.events)));
  const got = await srv.beaconEvents(gameId, expected.length);
  assert.deepEqual(got, expected, 'beacons received by the server are kiln.events');
  for (const b of srv.beacons.filter((x) => x.body?.events?.some((e) => e.game === gameId))) {
    assert.match(b.contentType, /^text\/plain/, 'beacon is a text/plain body');
  }
}

describe('library cache outcomes', () => {
  it('cold miss, then a hit from Cache Storage on a new page of the same origin', async () => {
    const eng = makeEngine();
    const { d, url } = game('cold', eng);
    const ctx = await newContext();

    const p1 = await open(ctx, url);
    const s1 = await state(p1);
    assert.equal(s1.started, '1.2.3', 'game.js ran after the engine');
    assert.equal(await p1.evaluate(() => window.viaApi), '1.2.3');
    assert.deepEqual(s1.ran, ['fake@1.2.3']);
    const [e1, ...more1] = engineEvents(s1.events);
    assert.equal(more1.length, 0, 'one event per engine per page, though engine() was called twice');
    assert.equal(e1.outcome, 'miss');
    assert.equal(e1.reason, 'cold');
    assert.equal(e1.prewarmed, false);
    assert.equal(e1.engine, 'fake');
    assert.equal(e1.version, '1.2.3');
    assert.equal(e1.game, 'cold');
    assert.equal(typeof e1.ms, 'number');
    assert.equal(e1.device.class, 'desktop');
    assert.equal(e1.device.os, 'linux');
    assert.equal(e1.device.runtime, 'chrome');
    assert.deepEqual(p1.summary.engines, [{ name: 'fake', version: '1.2.3', outcome: 'miss', reason: 'cold', ms: e1.ms }]);
    assert.equal(count(libPath(d)), 1);

    const p2 = await open(ctx, url);
    const s2 = await state(p2);
    assert.equal(s2.started, '1.2.3');
    assert.deepEqual(s2.ran, ['fake@1.2.3']);
    const [e2] = engineEvents(s2.events);
    assert.equal(e2.outcome, 'hit');
    assert.equal(e2.reason, null);
    assert.equal(e2.prewarmed, false);
    assert.equal(count(libPath(d)), 1, 'the hit did not touch the network');
    assert.equal(count(`/g/cold/${d.path}`), 0, 'the build copy was never needed');
    const index = await p2.evaluate(() => JSON.parse(localStorage.getItem('kiln:lib')));
    assert.deepEqual(Object.keys(index), [eng.sha256]);
    assert.equal(index[eng.sha256].name, 'fake');
    assert.equal(index[eng.sha256].version, '1.2.3');
    await assertBeaconsMatch('cold', [p1, p2]);
    assert.deepEqual([...p1.errors, ...p2.errors], []);
  });

  it("a lobby's claim (#kiln-prewarmed=<time>) labels a hit prewarmed: only a hit, only a recent claim, once", async () => {
    const eng = makeEngine({ version: '4.5.6' });
    const { url } = game('lobby', eng);
    const ctx = await newContext();
    // Claimed, but the engine came from the network: a miss stays a plain miss.
    const cold = await open(ctx, `${url}#kiln-prewarmed=${Date.now()}`);
    const [c] = engineEvents((await state(cold)).events);
    assert.deepEqual([c.outcome, c.prewarmed], ['miss', false]);
    // Claimed by the lobby that warmed it: a prewarmed hit; the fragment is taken off the
    // address (the game's own fragment stays), so a reload does not claim again.
    const claimed = await open(ctx, `${url}#level=2&kiln-prewarmed=${Date.now()}`);
    const [h] = engineEvents((await state(claimed)).events);
    assert.deepEqual([h.outcome, h.prewarmed], ['hit', true]);
    assert.equal(await claimed.evaluate(() => location.hash), '#level=2');
    await claimed.reload();
    await claimed.evaluate(() => kiln.ready);
    const [r] = engineEvents((await state(claimed)).events);
    assert.deepEqual([r.outcome, r.prewarmed], ['hit', false]);
    // A stale claim (11 minutes old) and a malformed one: not prewarmed.
    for (const hash of [`#kiln-prewarmed=${Date.now() - 660e3}`, '#kiln-prewarmed=soon']) {
      const p = await open(ctx, url + hash);
      const [e] = engineEvents((await state(p)).events);
      assert.deepEqual([e.outcome, e.prewarmed], ['hit', false], hash);
    }
    assert.match(await claimed.evaluate(() => kiln.prewarmedUrl('https://g.example/play/x/')), /^https:\/\/g\.example\/play\/x\/#kiln-prewarmed=\d+$/);
    assert.match(await claimed.evaluate(() => kiln.prewarmedUrl('/play/x/#a=1')), /^\/play\/x\/#a=1&kiln-prewarmed=\d+$/);
    assert.deepEqual([...cold.errors, ...claimed.errors], []);
  });

  it('version_mismatch: the device holds another version of the same engine', async () => {
    const v1 = makeEngine({ version: '1.0.0' });
    const v2 = makeEngine({ version: '2.0.0' });
    const a = game('vm', v1, { page: 'v1.html' });
    const b = game('vm', v2, { page: 'v2.html' });
    const ctx = await newContext();
    await open(ctx, a.url);
    const p2 = await open(ctx, b.url);
    const s2 = await state(p2);
    const [e] = engineEvents(s2.events);
    assert.equal(e.outcome, 'miss');
    assert.equal(e.reason, 'version_mismatch');
    assert.equal(e.version, '2.0.0');
    assert.equal(s2.started, '2.0.0');
    assert.equal(count(libPath(b.d)), 1);
  });

  it('evicted: the index remembers the engine but Cache Storage lost it', async () => {
    const eng = makeEngine({ version: '3.0.0' });
    const { d, url } = game('evict', eng);
    const ctx = await newContext();
    const p1 = await open(ctx, url);
    assert.equal(await p1.evaluate((u) => caches.open('kiln-library-v1').then((c) => c.delete(u)), d.url), true);
    const p2 = await open(ctx, url);
    const [e] = engineEvents((await state(p2)).events);
    assert.equal(e.outcome, 'miss');
    assert.equal(e.reason, 'evicted');
    assert.equal(count(libPath(d)), 2);
    const p3 = await open(ctx, url);
    assert.equal(engineEvents((await state(p3)).events)[0].outcome, 'hit', 'cached again after the miss');
  });

  it('a tampered Cache Storage entry is never run: miss integrity_failed, fetched again', async () => {
    const eng = makeEngine({ version: '4.0.0' });
    const { d, url } = game('cachetamper', eng);
    const ctx = await newContext();
    const p1 = await open(ctx, url);
    await p1.evaluate(([u, code]) => caches.open('kiln-library-v1').then((c) => c.put(u, new Response(code))), [d.url, tampered(eng).toString()]);
    const p2 = await open(ctx, url);
    const s2 = await state(p2);
    assert.equal(s2.tampered, false, 'tampered bytes did not run');
    assert.deepEqual(s2.ran, ['fake@4.0.0']);
    const [e] = engineEvents(s2.events);
    assert.equal(e.outcome, 'miss');
    assert.equal(e.reason, 'integrity_failed');
    const cached = await p2.evaluate((u) => caches.open('kiln-library-v1').then((c) => c.match(u)).then((r) => r.text()), d.url);
    assert.equal(cached, eng.code, 'the verified bytes replaced the tampered entry');
  });
});

describe('fallback to the build copy', () => {
  it('tampered library bytes are not executed; the build copy loads through SRI', async () => {
    const eng = makeEngine({ version: '5.0.0' });
    const { d, url, gameDir } = game('libtamper', eng, { publishOpts: { library: tampered(eng) } });
    const ctx = await newContext();
    const p = await open(ctx, url);
    const s = await state(p);
    assert.equal(s.tampered, false, 'tampered library bytes never ran');
    assert.equal(s.executed, 1, 'only the verified build copy ran');
    assert.deepEqual(s.ran, ['fake@5.0.0']);
    assert.equal(s.started, '5.0.0');
    const [e] = engineEvents(s.events);
    assert.equal(e.outcome, 'fallback');
    assert.equal(e.reason, 'integrity_failed');
    assert.equal(count(`${gameDir}/${d.path}`), 1);
    const sri = await p.evaluate((path) => document.querySelector(`script[src="${path}"], script[src$="/${path}"]`)?.integrity, d.path);
    assert.match(sri, /^sha256-[A-Za-z0-9+/]{43}=$/);
    assert.equal(Buffer.from(sri.slice(7), 'base64').toString('hex'), eng.sha256);
    assert.equal(await p.evaluate((u) => caches.open('kiln-library-v1').then((c) => c.match(u)).then((r) => r ?? null), d.url), null, 'bad bytes were not cached');
    await assertBeaconsMatch('libtamper', [p]);
  });

  it('tampered library and tampered build copy: error, and nothing runs', async () => {
    const eng = makeEngine({ version: '6.0.0' });
    const { url } = game('bothtamper', eng, { publishOpts: { library: tampered(eng), own: tampered(eng) } });
    const ctx = await newContext();
    const p = await open(ctx, url);
    const s = await state(p);
    assert.equal(s.tampered, false);
    assert.equal(s.executed, 0, 'no engine code ran at all');
    assert.equal(s.engine, null);
    const [e] = engineEvents(s.events);
    assert.equal(e.outcome, 'error');
    assert.equal(e.reason, 'integrity_failed');
    assert.equal(s.started, 'no engine', 'the game scripts still replayed');
    assert.equal(await p.evaluate(() => kiln.engine('fake').then(() => 'resolved', (err) => err.reason)), 'integrity_failed');
    assert.equal(await p.evaluate(() => window.viaApi), 'rejected:integrity_failed');
  });

  it('timeout: a library that does not answer in timeoutMs falls back', async () => {
    const eng = makeEngine({ version: '7.0.0' });
    const { url } = game('slow', eng, { config: { timeoutMs: 400 }, publishOpts: { libraryDelayMs: 4000 } });
    const ctx = await newContext();
    const t0 = Date.now();
    const p = await open(ctx, url);
    assert.ok(Date.now() - t0 < 3500, 'did not wait for the slow library');
    const s = await state(p);
    const [e] = engineEvents(s.events);
    assert.equal(e.outcome, 'fallback');
    assert.equal(e.reason, 'timeout');
    assert.equal(s.started, '7.0.0');
    assert.deepEqual(s.ran, ['fake@7.0.0']);
  });

  it('unsupported: without crypto.subtle the library is skipped and SRI still guards the build copy', async () => {
    const noSubtle = () => { Object.defineProperty(Crypto.prototype, 'subtle', { get: () => undefined, configurable: true }); };
    const eng = makeEngine({ version: '8.0.0' });
    const good = game('nosubtle', eng, { page: 'good.html' });
    const ctx = await newContext(noSubtle);
    const p = await open(ctx, good.url);
    const s = await state(p);
    assert.equal(await p.evaluate(() => typeof crypto.subtle), 'undefined');
    const [e] = engineEvents(s.events);
    assert.equal(e.outcome, 'fallback');
    assert.equal(e.reason, 'unsupported');
    assert.equal(s.started, '8.0.0');
    assert.equal(count(libPath(good.d)), 0, 'unverifiable library bytes were not even fetched');

    const evil = makeEngine({ version: '8.1.0' });
    const bad = game('nosubtle2', evil, { publishOpts: { own: tampered(evil) } });
    const p2 = await open(ctx, bad.url);
    const s2 = await state(p2);
    assert.equal(s2.executed, 0, 'SRI refused the tampered build copy');
    assert.equal(engineEvents(s2.events)[0].outcome, 'error');
  });

  it('unsupported: a module engine without crypto.subtle loads the build copy as an SRI module script', async () => {
    const noSubtle = () => { Object.defineProperty(Crypto.prototype, 'subtle', { get: () => undefined, configurable: true }); };
    const eng = makeEngine({ module: true, version: '8.2.0' });
    const dir = '/g/nosubtlemod';
    srv.set(`${dir}/main.js`, "import * as E from './libs/fake.module.js'; window.rel = E.hello();");
    const { d, url } = game('nosubtlemod', eng, { deferred: '<script type="text/kiln-deferred" data-kiln-type="module" src="main.js"></script>' });
    const ctx = await newContext(noSubtle);
    const p = await open(ctx, url);
    const s = await state(p);
    const [e] = engineEvents(s.events);
    assert.equal(e.outcome, 'fallback');
    assert.equal(e.reason, 'unsupported');
    assert.equal(await p.evaluate(() => kiln.engine('fake').then((m) => m.hello())), 'hello from fake@8.2.0');
    assert.equal(await p.evaluate(() => window.rel), 'hello from fake@8.2.0');
    assert.equal(s.executed, 1, 'the game shares the SRI-checked module instance');
    assert.equal(count(`${dir}/${d.path}`), 1);
  });

  it('unsupported: without Cache Storage the library is fetched and verified every time', async () => {
    const noCaches = () => { Object.defineProperty(window, 'caches', { value: undefined, configurable: true }); };
    const eng = makeEngine({ version: '9.0.0' });
    const { d, url } = game('nocaches', eng);
    const ctx = await newContext(noCaches);
    for (let i = 0; i < 2; i++) {
      const p = await open(ctx, url);
      const s = await state(p);
      const [e] = engineEvents(s.events);
      assert.equal(e.outcome, 'miss');
      assert.equal(e.reason, 'unsupported');
      assert.equal(s.started, '9.0.0');
    }
    assert.equal(count(libPath(d)), 2);
  });
});

describe('preheat and signed manifests', () => {
  function container(id) {
    return srv.set(`/c/${id}/index.html`, CONTAINER_PAGE);
  }

  it('preheat verifies the manifest and warms the engine; engine() in the same page is a prewarmed hit', async () => {
    const eng = makeEngine({ version: '10.0.0' });
    const d = publish(srv, 'pre', eng, { gameDir: '/g/pre' });
    const manifestUrl = srv.manifest('/v1/games/pre/manifest', manifestFor('pre', [d]));
    const ctx = await newContext();
    const p = await open(ctx, container('pre'), { boot: false });
    const summary = await p.evaluate(([m, keys, telemetry]) => {
      kiln.configure({ telemetry, keys });
      return kiln.preheat(m);
    }, [manifestUrl, srv.trusted, `${srv.origin}/v1/telemetry`]);
    assert.equal(summary.game, 'pre');
    assert.equal(summary.sequence, 7);
    assert.equal(summary.engines.length, 1);
    assert.equal(summary.engines[0].outcome, 'miss');
    assert.equal(summary.engines[0].reason, 'cold');
    assert.equal(await p.evaluate(() => globalThis.FAKEENGINE?.version), '10.0.0', 'evaluated ahead of time');
    assert.deepEqual(await p.evaluate(() => kiln.events), [], 'nothing reported before the game asks');

    assert.equal(await p.evaluate(() => kiln.engine('fake').then((e) => e.version)), '10.0.0');
    const s = await state(p);
    assert.equal(s.executed, 1, 'engine() reused the prewarmed engine');
    const events = engineEvents(s.events);
    assert.equal(events.length, 1);
    assert.equal(events[0].outcome, 'hit');
    assert.equal(events[0].reason, null);
    assert.equal(events[0].prewarmed, true);
    assert.equal(events[0].game, 'pre');
    assert.equal(await p.evaluate(() => JSON.parse(JSON.parse(localStorage.getItem('kiln:seq:pre')).body).sequence), 7);
    await assertBeaconsMatch('pre', [p]);
  });

  it("beacons carry the manifest's beacon token, with its sequence and expiry", async () => {
    const eng = makeEngine({ version: '10.1.0' });
    const d = publish(srv, 'tok', eng, { gameDir: '/g/tok' });
    const expires = new Date(Date.now() + 86400e3).toISOString();
    const manifest = { ...manifestFor('tok', [d], { sequence: 9, expires }), beacon: { token: 'ab12', expires } };
    const manifestUrl = srv.manifest('/v1/games/tok/manifest', manifest);
    const ctx = await newContext();
    const p = await open(ctx, container('tok'), { boot: false });
    await p.evaluate(([m, keys, telemetry]) => {
      kiln.configure({ telemetry, keys });
      return kiln.preheat(m).then(() => kiln.engine('fake'));
    }, [manifestUrl, srv.trusted, `${srv.origin}/v1/telemetry`]);
    const [e] = await srv.beaconEvents('tok', 1);
    assert.equal(e?.type, 'preheat');
    assert.deepEqual(e.beacon, { token: 'ab12', sequence: 9, expires });
    // kiln.events stays what the page saw; only the beacon carries the token.
    const [local] = engineEvents((await state(p)).events);
    assert.equal(local.beacon, undefined);
  });

  it('engines preheated but never asked for are reported when the page goes', async () => {
    const eng = makeEngine({ version: '11.0.0' });
    const d = publish(srv, 'preonly', eng, { gameDir: '/g/preonly' });
    const manifestUrl = srv.manifest('/v1/games/preonly/manifest', manifestFor('preonly', [d]));
    const ctx = await newContext();
    const p = await open(ctx, container('preonly'), { boot: false });
    await p.evaluate(([m, keys, telemetry]) => {
      kiln.configure({ telemetry });
      return kiln.preheat(m, { keys });
    }, [manifestUrl, srv.trusted, `${srv.origin}/v1/telemetry`]);
    await p.goto('about:blank');
    const [e] = await srv.beaconEvents('preonly', 1);
    assert.ok(e, 'a beacon arrived from pagehide');
    assert.equal(e.type, 'preheat');
    assert.equal(e.outcome, 'miss');
    assert.equal(e.reason, 'cold');
    assert.equal(e.prewarmed, false);
  });

  it('engine() called while the manifest is still being verified waits for it', async () => {
    const eng = makeEngine({ version: '12.0.0' });
    const d = publish(srv, 'early', eng, { gameDir: '/g/early' });
    const manifestUrl = srv.manifest('/v1/games/early/manifest', manifestFor('early', [d]));
    const ctx = await newContext();
    const p = await open(ctx, container('early'), { boot: false });
    const v = await p.evaluate(([m, keys]) => {
      kiln.preheat(m, { keys });
      return kiln.engine('fake').then((e) => e.version);
    }, [manifestUrl, srv.trusted]);
    assert.equal(v, '12.0.0');
    const [e] = engineEvents(await p.evaluate(() => kiln.events));
    assert.equal(e.outcome, 'miss', 'still loading when asked: reported as what the load found');
    assert.equal(e.prewarmed, false);
  });

  async function rejects(id, serve, expected, { seed } = {}) {
    const eng = makeEngine({ version: `13.0.${id.length}` });
    const d = publish(srv, `rej-${id}`, eng, { gameDir: `/g/rej-${id}` });
    const manifestUrl = serve(d);
    const ctx = await newContext();
    const p = await open(ctx, container(`rej-${id}`), { boot: false });
    if (seed) await p.evaluate(seed);
    const got = await p.evaluate(([m, keys, telemetry, gameId]) => {
      kiln.configure({ telemetry, keys });
      return kiln.preheat(m).then(() => 'accepted', (e) => ({ reason: e.reason, message: e.message, events: kiln.events, game: gameId }));
    }, [manifestUrl, srv.trusted, `${srv.origin}/v1/telemetry`, `rej-${id}`]);
    assert.equal(got.reason, expected, got.message);
    assert.deepEqual(got.events, [{ type: 'manifest', game: `rej-${id}`, outcome: 'rejected', reason: expected }]);
    assert.equal(count(libPath(d)), 0, 'no engine fetched for a rejected manifest');
    assert.equal(await p.evaluate(() => globalThis.__executed ?? 0), 0);
    await assertBeaconsMatch(`rej-${id}`, [p]);
    return p;
  }

  it('rejects a manifest whose body does not match its signature (bad_signature)', async () => {
    await rejects('badsig', (d) => srv.manifest('/v1/games/rej-badsig/manifest', manifestFor('rej-badsig', [d]), { corrupt: true }), 'bad_signature');
  });

  it('rejects a manifest with no Kiln-Signature header (bad_signature)', async () => {
    await rejects('nosig', (d) => srv.set('/v1/games/rej-nosig/manifest', JSON.stringify(manifestFor('rej-nosig', [d]))), 'bad_signature');
  });

  it('rejects a manifest signed by a key not among the given keys (unknown_key)', async () => {
    await rejects('unknown', (d) => srv.manifest('/v1/games/rej-unknown/manifest', manifestFor('rej-unknown', [d]), { key: 'other' }), 'unknown_key');
  });

  it('rejects an expired manifest (expired)', async () => {
    await rejects('expired', (d) => srv.manifest('/v1/games/rej-expired/manifest', manifestFor('rej-expired', [d], { expires: '2020-01-01T00:00:00Z' })), 'expired');
  });

  it('rejects a signed manifest that is not a schema 1 manifest (malformed)', async () => {
    await rejects('malformed', () => srv.manifest('/v1/games/rej-malformed/manifest', null, { raw: '{"schema":1,"game":"rej-malformed"' }), 'malformed');
  });

  it('rejects an older sequence after a newer one (rollback); the same sequence again is fine', async () => {
    const eng = makeEngine({ version: '14.0.0' });
    const d = publish(srv, 'rollback', eng, { gameDir: '/g/rollback' });
    const path = '/v1/games/rej-rollback/manifest';
    const ctx = await newContext();
    const p = await open(ctx, container('rollback'), { boot: false });
    const preheat = (m) => p.evaluate(([u, keys]) => kiln.preheat(u, { keys }).then((s) => `ok ${s.sequence}`, (e) => e.reason), [m, srv.trusted]);
    assert.equal(await preheat(srv.manifest(path, manifestFor('rej-rollback', [d], { sequence: 9 }))), 'ok 9');
    assert.equal(await preheat(srv.manifest(path, manifestFor('rej-rollback', [d], { sequence: 5 }))), 'rollback');
    assert.equal(await preheat(srv.manifest(path, manifestFor('rej-rollback', [d], { sequence: 9 }))), 'ok 9');
    // A new page of the same origin remembers the sequence.
    const p2 = await open(ctx, container('rollback'), { boot: false });
    assert.equal(await p2.evaluate(([u, keys]) => kiln.preheat(u, { keys }).then(() => 'ok', (e) => e.reason), [srv.manifest(path, manifestFor('rej-rollback', [d], { sequence: 8 })), srv.trusted]), 'rollback');
    assert.equal(await p2.evaluate(() => JSON.parse(JSON.parse(localStorage.getItem('kiln:seq:rej-rollback')).body).sequence), 9);
    const reasons = (await p.evaluate(() => kiln.events)).filter((e) => e.type === 'manifest').map((e) => e.reason);
    assert.deepEqual(reasons, ['rollback']);
  });

  it('another game on the origin cannot rewrite a game\'s rollback store to any effect', async () => {
    const eng = makeEngine({ version: '14.1.0' });
    const d = publish(srv, 'victim', eng, { gameDir: '/g/victim' });
    const path = '/v1/games/victim/manifest';
    const ctx = await newContext();
    const p = await open(ctx, container('victim'), { boot: false });
    const preheat = (page, m) => page.evaluate(([u, keys]) => kiln.preheat(u, { keys }).then((s) => `ok ${s.sequence}`, (e) => e.reason), [m, srv.trusted]);
    assert.equal(await preheat(p, srv.manifest(path, manifestFor('victim', [d], { sequence: 3 }))), 'ok 3');
    // A hostile page of the same origin (every game shares its localStorage) writes a huge
    // sequence into the victim's store: as the old bare number, as a record with an unsigned
    // body, as a body signed for another game, and as a body whose signature is another's.
    const hostile = await open(ctx, container('hostile'), { boot: false });
    const other = srv.signed(manifestFor('hostile', [d], { sequence: 999999 }));
    const otherBody = other.body.toString();
    const otherSig = other.headers['kiln-signature'];
    const forged = JSON.stringify({ ...manifestFor('victim', [d], { sequence: 1e15 }) });
    for (const record of [
      '1000000000000000',
      JSON.stringify({ body: forged, sig: 'keyid=x,sig=AAAA' }),
      JSON.stringify({ body: otherBody, sig: otherSig }),
      JSON.stringify({ body: forged, sig: otherSig }),
    ]) {
      await hostile.evaluate((r) => localStorage.setItem('kiln:seq:victim', r), record);
      // The victim's next visit still takes its live release.
      const v = await open(ctx, container('victim'), { boot: false });
      assert.equal(await preheat(v, srv.manifest(path, manifestFor('victim', [d], { sequence: 4 }))), 'ok 4', record.slice(0, 60));
      await v.close();
    }
    // A genuine record still protects: an older release after 4 is refused.
    const v = await open(ctx, container('victim'), { boot: false });
    assert.equal(await preheat(v, srv.manifest(path, manifestFor('victim', [d], { sequence: 4 }))), 'ok 4');
    assert.equal(await preheat(v, srv.manifest(path, manifestFor('victim', [d], { sequence: 2 }))), 'rollback');
  });
});

describe('boot', () => {
  it('replays deferred scripts in document order, then the held DOMContentLoaded and load', async () => {
    const eng = makeEngine({ version: '15.0.0' });
    const dir = '/g/order';
    srv.set(`${dir}/a.js`, "(window.order = window.order || []).push('a:' + FAKEENGINE.version);");
    srv.set(`${dir}/slow.js`, "order.push('slow:' + (typeof window.fromC));", { delayMs: 300 });
    srv.set(`${dir}/c.js`, "window.fromC = 1; order.push('c');");
    const deferred = `
<script type="text/kiln-deferred" src="a.js"></script>
<script type="text/kiln-deferred" id="i1">order.push('inline:' + document.currentScript.id)</script>
<script type="text/kiln-deferred" src="slow.js"></script>
<script type="text/kiln-deferred" src="c.js"></script>
<script type="text/kiln-deferred" data-kiln-type="x-shader/x-vertex" id="vs">void main() { gl_Position = vec4(0.0); }</script>
<script type="text/kiln-deferred">
  document.addEventListener('DOMContentLoaded', () => order.push('dcl'));
  window.addEventListener('load', () => { order.push('load'); window.gameStarted = true; });
</script>`;
    const { url } = game('order', eng, { deferred, bodyAttrs: `onload="order.push('body-onload')"` });
    const ctx = await newContext();
    const p = await open(ctx, url);
    await p.waitForFunction(() => window.gameStarted === true, null, { timeout: 5000 });
    const s = await state(p);
    assert.deepEqual(s.order, ['a:15.0.0', 'inline:i1', 'slow:undefined', 'c', 'dcl', 'body-onload', 'load']);
    assert.equal(await p.evaluate(() => document.querySelectorAll('script[type="text/kiln-deferred"]').length), 0);
    assert.equal(await p.evaluate(() => document.getElementById('vs').type), 'x-shader/x-vertex');
    assert.match(await p.evaluate(() => document.getElementById('vs').text), /gl_Position/);
    assert.deepEqual(p.errors, []);
  });

  it('module engine: verified once, and the game imports it through the import map (relative and bare)', async () => {
    const eng = makeEngine({ module: true, version: '16.0.0' });
    const dir = '/g/mod';
    srv.set(`${dir}/main.js`, "import * as E from './libs/fake.module.js'; window.rel = E.hello(); (window.order = window.order || []).push('main');");
    const deferred = `
<script type="text/kiln-deferred" data-kiln-type="importmap">{"imports":{"fake":"./libs/fake.module.js","other":"./other.js"}}</script>
<script type="text/kiln-deferred" data-kiln-type="module" src="main.js"></script>
<script type="text/kiln-deferred" data-kiln-type="module">import { hello } from 'fake'; window.bare = hello(); order.push('inline-module');</script>
<script type="text/kiln-deferred">order.push('classic-after'); window.gameStarted = true;</script>`;
    const { d, url } = game('mod', eng, { deferred });
    const ctx = await newContext();
    const p = await open(ctx, url);
    const s = await state(p);
    assert.deepEqual(s.order, ['main', 'inline-module', 'classic-after']);
    assert.equal(await p.evaluate(() => window.rel), 'hello from fake@16.0.0');
    assert.equal(await p.evaluate(() => window.bare), 'hello from fake@16.0.0');
    assert.equal(s.executed, 1, 'one instance of the engine');
    assert.equal(count(`${dir}/${d.path}`), 0, 'the unverified build copy was never fetched');
    assert.equal(await p.evaluate(async () => (await import('./libs/fake.module.js')) === (await kiln.engine('fake'))), true);
    const maps = await p.evaluate(() => [...document.querySelectorAll('script[type="importmap"]')].map((x) => JSON.parse(x.text)));
    assert.equal(maps.length, 1, "the game's import map merged into one");
    assert.match(maps[0].imports.fake, /^blob:/);
    assert.equal(maps[0].imports.other, './other.js');
    const [e] = engineEvents(s.events);
    assert.equal(e.outcome, 'miss');
    assert.equal(e.reason, 'cold');
    assert.deepEqual(p.errors, []);

    const p2 = await open(ctx, url);
    assert.equal(await p2.evaluate(() => window.rel), 'hello from fake@16.0.0');
    assert.equal(engineEvents((await state(p2)).events)[0].outcome, 'hit');
  });

  it('module engine with tampered library bytes: the verified build copy is imported instead', async () => {
    const eng = makeEngine({ module: true, version: '17.0.0' });
    const dir = '/g/modtamper';
    srv.set(`${dir}/main.js`, "import * as E from './libs/fake.module.js'; window.rel = E.hello();");
    const deferred = '<script type="text/kiln-deferred" data-kiln-type="module" src="main.js"></script>';
    const { url } = game('modtamper', eng, { deferred, publishOpts: { library: tampered(eng) } });
    const ctx = await newContext();
    const p = await open(ctx, url);
    const s = await state(p);
    assert.equal(s.tampered, false);
    assert.equal(s.executed, 1);
    assert.equal(await p.evaluate(() => window.rel), 'hello from fake@17.0.0');
    const [e] = engineEvents(s.events);
    assert.equal(e.outcome, 'fallback');
    assert.equal(e.reason, 'integrity_failed');
  });

  it('module engine with both copies tampered: nothing runs', async () => {
    const eng = makeEngine({ module: true, version: '18.0.0' });
    const { url } = game('modboth', eng, { deferred: '', publishOpts: { library: tampered(eng), own: tampered(eng) } });
    const ctx = await newContext();
    const p = await open(ctx, url);
    const s = await state(p);
    assert.equal(s.executed, 0);
    assert.equal(engineEvents(s.events)[0].outcome, 'error');
    assert.equal(engineEvents(s.events)[0].reason, 'integrity_failed');
  });
});

describe('trust document (pinned roots, rotated and revoked keys)', () => {
  const later = new Date(Date.now() + 86400e3).toISOString();
  const active = (k) => ({ jwk: srv.keys[k], status: 'active' });
  const retired = (k) => ({ jwk: srv.keys[k], status: 'retired' });
  after(() => srv.files.delete('/v1/keys/trust'));
  function container(id) {
    return srv.set(`/c/${id}/index.html`, CONTAINER_PAGE);
  }
  // Preheats a manifest of `id` signed by `key` in `p`, pinning `pins`: 'ok <sequence>' or the reason.
  async function verifyIn(p, id, key, pins, sequence = 3) {
    const d = publish(srv, `trust-${id}`, makeEngine({ version: '21.0.0' }), { gameDir: `/g/trust-${id}` });
    const m = srv.manifest(`/v1/games/trust-${id}/manifest`, manifestFor(`trust-${id}`, [d], { sequence }), { key });
    return p.evaluate(([u, keys]) => kiln.preheat(u, { keys }).then((s) => `ok ${s.sequence}`, (e) => e.reason), [m, pins.map((k) => srv.keys[k])]);
  }
  async function page(id) {
    return open(await newContext(), container(`trust-${id}`), { boot: false });
  }

  it('a page pinning only the root verifies a manifest signed by a key the document lists (active or retired)', async () => {
    srv.trust({ version: 2, expires: later, keys: [active('other'), retired('good')] });
    const p = await page('rotated');
    assert.equal(await verifyIn(p, 'rotated', 'other', ['root']), 'ok 3');
    assert.equal(await verifyIn(p, 'retired', 'good', ['root']), 'ok 3');
    assert.ok(srv.requested('/v1/keys/trust'));
    const stored = await p.evaluate((o) => localStorage.getItem('kiln:trust:' + o), srv.origin);
    assert.equal(JSON.parse(JSON.parse(stored).signed).version, 2, 'kept as the signed document');
  });

  it('refuses a key the document revokes (revoked_key), and one it does not list (unknown_key)', async () => {
    srv.trust({ version: 3, expires: later, keys: [active('other')], revoked: [srv.keys.good.kid] });
    const p = await page('revoked');
    assert.equal(await verifyIn(p, 'revoked', 'good', ['root']), 'revoked_key');
    srv.trust({ version: 3, expires: later, keys: [active('other')] });
    assert.equal(await verifyIn(p, 'unlisted', 'good', ['root']), 'unknown_key');
    const reasons = (await p.evaluate(() => kiln.events)).filter((e) => e.type === 'manifest').map((e) => e.reason);
    assert.deepEqual(reasons, ['revoked_key', 'unknown_key']);
  });

  it('during a root rotation the document signed by the old and the new root verifies with either pinned', async () => {
    srv.trust({ version: 4, expires: later, keys: [active('other')] }, { by: ['root', 'root2'] });
    const p = await page('root-rotation');
    assert.equal(await verifyIn(p, 'old-root', 'other', ['root']), 'ok 3');
    assert.equal(await verifyIn(p, 'new-root', 'other', ['root2']), 'ok 3');
    // Once the old root no longer signs, a page pinning only it learns no new key.
    srv.trust({ version: 5, expires: later, keys: [active('other')] }, { by: ['root2'] });
    assert.equal(await verifyIn(p, 'dropped-root', 'other', ['root']), 'unknown_key');
  });

  it('refuses a document older than one this origin verified before (trust_rollback), also on a new page', async () => {
    const p = await page('rollback');
    srv.trust({ version: 9, expires: later, keys: [active('other')] });
    assert.equal(await verifyIn(p, 'rollback', 'other', ['root']), 'ok 3');
    srv.trust({ version: 8, expires: later, keys: [active('other'), retired('good')] });
    assert.equal(await verifyIn(p, 'rollback-old', 'good', ['root']), 'trust_rollback');
    const p2 = await open(p.context(), container('trust-rollback'), { boot: false });
    assert.equal(await verifyIn(p2, 'rollback-again', 'good', ['root']), 'trust_rollback');
    // A stored document that does not verify any more sets no floor.
    await p2.evaluate((o) => localStorage.setItem('kiln:trust:' + o, localStorage.getItem('kiln:trust:' + o).replace('"version\\":9', '"version\\":99')), srv.origin);
    assert.match(await p2.evaluate((o) => localStorage.getItem('kiln:trust:' + o), srv.origin), /version\\":99/);
    srv.trust({ version: 9, expires: later, keys: [active('other')] });
    assert.equal(await verifyIn(p2, 'rollback-same', 'other', ['root']), 'ok 3');
  });

  it('refuses a forged document (bad_trust under the root\'s kid, unknown_key under its own) and an expired one (trust_expired)', async () => {
    const p = await page('forged');
    srv.trust({ version: 20, expires: later, keys: [active('other')] }, { by: ['forger'] });
    assert.equal(await verifyIn(p, 'forged', 'other', ['root']), 'unknown_key');
    const env = JSON.parse(srv.files.get('/v1/keys/trust').body.toString());
    env.signatures[0].keyid = srv.keys.root.kid;
    srv.set('/v1/keys/trust', JSON.stringify(env));
    assert.equal(await verifyIn(p, 'forged-kid', 'other', ['root']), 'bad_trust');
    srv.trust({ version: 21, expires: '2020-01-01T00:00:00Z', keys: [active('other')] });
    assert.equal(await verifyIn(p, 'expired', 'other', ['root']), 'trust_expired');
  });
});

describe('without a DOM', () => {
  it('loads in a bare JavaScript context without throwing, and reports what it cannot do', async () => {
    const sandbox = { setTimeout, clearTimeout, Promise };
    vm.createContext(sandbox);
    assert.doesNotThrow(() => vm.runInContext(fs.readFileSync(LOADER_PATH, 'utf8'), sandbox));
    const kiln = sandbox.kiln;
    assert.equal(typeof kiln.boot, 'function');
    const reason = await kiln.preheat('https://example.invalid/v1/games/x/manifest').then(() => 'ok', (e) => e.reason);
    assert.equal(reason, 'unsupported');
    assert.equal(kiln.events[0].game, 'x');
    assert.equal(await kiln.engine('nope').then(() => 'ok', (e) => e.reason), 'error');
    assert.equal(typeof kiln.device().class, 'string');
  });
});
