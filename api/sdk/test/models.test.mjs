// Browser tests of the loader's per-device manifests and kiln.model (variant choice, decoder
// fallback, decode beacons), in real headless Chromium: node --test api/sdk/test/

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { CONTAINER_PAGE, launchChromium, makeEngine, publish, startServer } from './support.mjs';

let browser;
let srv;

before(async () => {
  [browser, srv] = await Promise.all([launchChromium(), startServer()]);
});
after(async () => {
  await browser?.close();
  await srv?.close();
});

async function open(id, { ctx, init } = {}) {
  ctx ??= await browser.newContext();
  if (init) await ctx.addInitScript(init);
  const page = await ctx.newPage();
  page.errors = [];
  page.on('console', (m) => { if (m.type() === 'error') page.errors.push(m.text()); });
  page.on('pageerror', (e) => page.errors.push(String(e)));
  await page.goto(srv.set(`/c/${id}/index.html`, CONTAINER_PAGE));
  page.ctx = ctx;
  return page;
}

function manifestFor(game, { engines = [], models = [], sequence = 7 } = {}) {
  return {
    schema: 1, game, version: '1.0.0', build_id: `build-${game}`, sequence,
    expires: new Date(Date.now() + 86400e3).toISOString(), files: [], engines, models,
  };
}

const manifestRequests = (game) => srv.requests.filter((r) => r.path === `/v1/games/${game}/manifest`);
const count = (p) => srv.requests.filter((r) => r.path === p).length;

// Serves /v1/games/<game>/manifest like Kiln: a class from ?device=, else from the descriptor
// (a toy rule table), in the signed body and in Kiln-Device-Class. perClass(cls) edits the manifest.
function perDevice(game, base, perClass = () => ({})) {
  return srv.route(`/v1/games/${game}/manifest`, (url) => {
    const q = url.searchParams;
    let cls = null;
    if (q.has('device')) cls = q.get('device');
    else if (q.has('os')) cls = q.get('os') === 'android' && Number(q.get('memory')) < 4 ? 'android-low' : q.get('os') === 'linux' ? 'android-mid' : 'unknown';
    const body = cls ? { ...base, device_class: cls, ...perClass(cls) } : base;
    const { body: bytes, headers } = srv.signed(body);
    return { body: bytes, headers: cls ? { ...headers, 'kiln-device-class': cls } : headers };
  });
}

function preheat(page, manifestUrl, config = {}) {
  return page.evaluate(([m, cfg]) => {
    kiln.configure(cfg);
    return kiln.preheat(m).then((s) => s, (e) => ({ rejected: e.reason }));
  }, [manifestUrl, { keys: srv.trusted, telemetry: `${srv.origin}/v1/telemetry`, ...config }]);
}

describe('per-device manifests', () => {
  it('appends the device descriptor, caches the class the server used, then asks for that class', async () => {
    const eng = makeEngine({ version: '20.0.0' });
    const d = publish(srv, 'dev', eng, { gameDir: '/g/dev' });
    const url = perDevice('dev', manifestFor('dev', { engines: [d] }));
    const p = await open('dev');
    const guess = await p.evaluate(() => kiln.device());
    assert.equal(guess.class, 'desktop', "the loader's own guess before the server said");

    const s1 = await preheat(p, url);
    assert.equal(s1.sequence, 7);
    assert.equal(s1.device_class, 'android-mid');
    const [r1] = manifestRequests('dev');
    const q1 = new URLSearchParams(r1.search);
    assert.equal(q1.has('device'), false);
    for (const k of ['os', 'os_version', 'runtime', 'model', 'memory', 'cores']) {
      if (guess[k] == null) assert.equal(q1.has(k), false, `${k} is null: not sent`);
      else assert.equal(q1.get(k), String(guess[k]), k);
    }
    assert.equal(q1.get('os'), 'linux');
    assert.equal(q1.get('runtime'), 'chrome');
    assert.equal(await p.evaluate(() => localStorage.getItem('kiln:class')), 'android-mid');
    assert.equal(await p.evaluate(() => kiln.device().class), 'android-mid', "beacons carry the server's class");
    await p.evaluate(() => kiln.engine('fake'));
    const [ev] = (await p.evaluate(() => kiln.events)).filter((e) => e.type === 'preheat');
    assert.equal(ev.device.class, 'android-mid');
    assert.equal(ev.device.os, 'linux', 'the rest of the descriptor is still the browser');
    assert.equal(ev.bytes, eng.size, 'preheat events carry the engine size');

    // A new page of the same device: the cached class is asked for, not the descriptor.
    const p2 = await open('dev', { ctx: p.ctx });
    assert.equal(await p2.evaluate(() => kiln.device().class), 'android-mid', 'cached class known before any manifest');
    const s2 = await preheat(p2, url);
    assert.equal(s2.device_class, 'android-mid');
    assert.equal(manifestRequests('dev')[1].search, '?device=android-mid');
    assert.equal(await p2.evaluate(() => JSON.parse(JSON.parse(localStorage.getItem('kiln:seq:dev')).body).sequence), 7, 'one sequence for every class');

    // The per-device manifest is still checked for rollback.
    perDevice('dev', manifestFor('dev', { engines: [d], sequence: 6 }));
    assert.deepEqual(await preheat(p2, url), { rejected: 'rollback' });
    assert.equal(manifestRequests('dev')[2].search, '?device=android-mid');
    assert.deepEqual([...p.errors, ...p2.errors], []);
  });

  it('configure({deviceClass}) forces the class: asked for, in beacons, and not cached', async () => {
    const url = perDevice('forced', manifestFor('forced'));
    const p = await open('forced');
    const s = await preheat(p, url, { deviceClass: 'ios-low' });
    assert.equal(s.device_class, 'ios-low');
    assert.equal(manifestRequests('forced')[0].search, '?device=ios-low');
    assert.equal(await p.evaluate(() => kiln.device().class), 'ios-low');
    assert.equal(await p.evaluate(() => localStorage.getItem('kiln:class')), null);
    assert.equal(await p.evaluate(() => { kiln.configure({ deviceClass: 'nonsense' }); return kiln.device().class; }), 'desktop', 'an unknown class is ignored');
  });

  it("configure({device}) overrides the user agent's descriptor; a URL with its own query is left alone", async () => {
    const url = perDevice('host', manifestFor('host'));
    const p = await open('host');
    const host = { os: 'android', os_version: '8.1', model: 'Redmi 6', memory: 2, cores: 8, runtime: 'wechat-minigame' };
    const before = await p.evaluate((h) => { kiln.configure({ device: h }); return kiln.device(); }, host);
    assert.deepEqual(before, { class: 'android-low', ...host });
    await preheat(p, url);
    const q = new URLSearchParams(manifestRequests('host')[0].search);
    assert.deepEqual(Object.fromEntries(q), { os: 'android', os_version: '8.1', runtime: 'wechat-minigame', model: 'Redmi 6', memory: '2', cores: '8' });
    assert.equal(await p.evaluate(() => kiln.device().class), 'android-low');

    // 'unknown' from the server teaches nothing; an explicit query is the caller's.
    const p2 = await open('host2');
    await preheat(p2, perDevice('host2', manifestFor('host2')), { device: { os: 'plan9', memory: '3.5', cores: 'many' } });
    const q2 = new URLSearchParams(manifestRequests('host2')[0].search);
    assert.equal(q2.get('os'), 'plan9');
    assert.equal(q2.get('memory'), '3.5');
    assert.equal(q2.has('cores'), false, 'Kiln reads cores as an integer: a bad value is left out, not sent');
    assert.equal(await p2.evaluate(() => localStorage.getItem('kiln:class')), null);
    const s = await preheat(p2, `${url}?device=ios-high`);
    assert.equal(s.device_class, 'ios-high');
    assert.equal(manifestRequests('host').at(-1).search, '?device=ios-high');
    assert.equal(await p2.evaluate(() => localStorage.getItem('kiln:class')), null, 'not learned from a query the caller chose');
  });
});

// A model with three variants whose bytes say which they are (different lengths).
function modelGame(game, { choice, variants = ['meshopt', 'quantized', 'original'], preferred = 'meshopt', fallback = 'quantized', missing = [] } = {}) {
  const dir = `/m/${game}`;
  const bytes = { meshopt: 'MESHOPT', quantized: 'QUANTIZED-BYTES', original: 'ORIGINAL-BYTES-LONGEST', ktx2: 'KTX2-VARIANT' };
  const vs = variants.map((v) => ({
    variant: v,
    path: `assets/fox.${v}.glb`,
    url: missing.includes(v) ? `${srv.origin}${dir}/gone.${v}.glb` : srv.set(`${dir}/fox.${v}.glb`, bytes[v]),
    size: bytes[v].length,
    brotli_size: bytes[v].length - 1,
    needs_decoder: v === 'meshopt' || v === 'ktx2',
    ...(v === 'ktx2' ? { gpu_formats: ['astc', 'bc7'] } : {}),
  }));
  const model = { path: 'assets/fox.glb', preferred, fallback, variants: vs };
  if (choice) model.choice = choice;
  const url = srv.manifest(`/v1/games/${game}/manifest`, manifestFor(game, { models: [model] }));
  const path = (v) => `${dir}/fox.${v}.glb`;
  return { url, bytes, path, model };
}

// Preheats, then kiln.model('assets/fox.glb') with a decoder and parse described by name.
async function loadModel(game, { decoder = 'ok', parse = 'text', options = {}, config = {} } = {}) {
  const g = modelGame(game, config.game);
  const p = await open(game);
  await preheat(p, g.url, config.kiln);
  const t0 = Date.now();
  const out = await p.evaluate(([decoderName, parseName, opts]) => {
    const decoders = {
      ok: () => ({ ready: Promise.resolve(), supported: true }),
      fn: () => () => Promise.resolve(),
      reject: () => { const ready = Promise.reject(new Error('wasm crashed')); ready.catch(() => {}); return { ready }; },
      rejectfn: () => () => Promise.reject(new Error('wasm crashed')),
      throwfn: () => () => { throw new Error('no wasm'); },
      unsupported: () => ({ supported: false }),
      hang: () => ({ ready: new Promise(() => {}) }),
      none: () => undefined,
    };
    window.parsed = [];
    const parsers = {
      text: (buf, info) => { parsed.push(info.variant); return { text: new TextDecoder().decode(buf), info }; },
      async: (buf, info) => new Promise((y) => setTimeout(() => y({ text: new TextDecoder().decode(buf), info }), 30)),
      meshoptThrows: (buf, info) => {
        parsed.push(info.variant);
        if (info.variant === 'meshopt') throw new Error('THREE.GLTFLoader: setMeshoptDecoder must be called before loading compressed files');
        return { text: new TextDecoder().decode(buf), info };
      },
      alwaysThrows: () => { throw new Error('bad glb'); },
      ktx2Throws: (buf, info) => {
        parsed.push(info.variant);
        if (info.variant === 'ktx2') throw new Error('THREE.GLTFLoader: setKTX2Loader must be called before loading KTX2 textures');
        return { text: new TextDecoder().decode(buf), info };
      },
      onlyOriginal: (buf, info) => {
        parsed.push(info.variant);
        if (info.variant !== 'original') throw new Error('THREE.GLTFLoader: WebP required by asset but unsupported.');
        return { text: new TextDecoder().decode(buf), info };
      },
      none: undefined,
    };
    const o = { ...opts, decoder: decoders[decoderName](), parse: parsers[parseName] };
    // 'lazy': the KTX2 loader as a game imports it on demand; the call is recorded.
    if (opts.ktx2 === 'lazy') {
      window.ktx2Imports = 0;
      o.ktx2 = () => new Promise((y) => setTimeout(() => { window.ktx2Imports++; y({ workerConfig: { astcSupported: true } }); }, 20));
    }
    return kiln.model('assets/fox.glb', o).then((r) => {
      const result = r.result instanceof ArrayBuffer ? { arrayBuffer: new TextDecoder().decode(r.result) } : r.result;
      return { r: { ...r, result }, parsed: window.parsed, ktx2Imports: window.ktx2Imports };
    }, (e) => ({ rejected: e.reason, message: e.message, isError: e instanceof Error }));
  }, [decoder, parse, options]);
  out.elapsed = Date.now() - t0;
  await new Promise((r) => setTimeout(r, 50));
  out.events = (await p.evaluate(() => kiln.events)).filter((e) => e.type === 'decode');
  out.device = await p.evaluate(() => kiln.device());
  out.page = p;
  return { ...g, ...out, game };
}

const oneDecimal = (ms) => typeof ms === 'number' && ms >= 0 && Math.round(ms * 10) / 10 === ms;

function assertEvent(e, game, { variant, decoder, bytes, fallback, reason, measured = true }, device) {
  assert.deepEqual(Object.keys(e), ['type', 'game', 'asset', 'variant', 'decoder', 'bytes', 'ms', 'fallback', 'reason', 'device']);
  assert.equal(e.type, 'decode');
  assert.equal(e.game, game);
  assert.equal(e.asset, 'assets/fox.glb');
  assert.equal(e.variant, variant);
  assert.equal(e.decoder, decoder);
  assert.equal(e.bytes, bytes);
  if (measured) assert.ok(oneDecimal(e.ms), `ms ${e.ms} is a number with one decimal`);
  else assert.equal(e.ms, null);
  assert.equal(e.fallback, fallback);
  assert.equal(e.reason, reason);
  assert.deepEqual(e.device, device);
}

async function assertBeaconsMatch(game, page) {
  const expected = await page.evaluate(() => kiln.events);
  const got = await srv.beaconEvents(game, expected.length);
  assert.deepEqual(got, expected, 'beacons received by the server are kiln.events');
  for (const b of srv.beacons.filter((x) => x.body?.events?.some((e) => e.game === game))) {
    assert.match(b.contentType, /^text\/plain/);
  }
}

describe('kiln.model', () => {
  it('no choice: loads the preferred variant once its decoder is ready, and reports the decode', async () => {
    const m = await loadModel('mpref');
    assert.equal(m.r.variant, 'meshopt');
    assert.equal(m.r.path, 'assets/fox.glb');
    assert.equal(m.r.url, m.model.variants[0].url);
    assert.equal(m.r.bytes, m.bytes.meshopt.length);
    assert.equal(m.r.fallback, false);
    assert.equal(m.r.reason, null);
    assert.equal(m.r.decoder, 'wasm-simd', 'Chromium validates the SIMD probe');
    assert.ok(oneDecimal(m.r.ms));
    assert.ok(oneDecimal(m.r.fetch_ms));
    assert.equal(m.r.result.text, m.bytes.meshopt);
    assert.deepEqual(m.r.result.info, { variant: 'meshopt', url: m.model.variants[0].url, path: 'assets/fox.glb' });
    assert.equal(count(m.path('quantized')), 0);
    assert.equal(m.events.length, 1);
    assertEvent(m.events[0], 'mpref', { variant: 'meshopt', decoder: 'wasm-simd', bytes: 7, fallback: false, reason: null }, m.device);
    assert.equal(m.events[0].ms, m.r.ms);
    await assertBeaconsMatch('mpref', m.page);
    assert.deepEqual(m.page.errors, []);
  });

  it("uses the per-device manifest's choice.variant, without waiting for a decoder it does not need", async () => {
    const m = await loadModel('mchoice', {
      decoder: 'hang',
      config: { game: { choice: { variant: 'quantized', reason: 'slow_class', detail: 'android-low decodes meshopt slowly', estimates: [] } } },
    });
    assert.equal(m.r.variant, 'quantized');
    assert.equal(m.r.decoder, 'none');
    assert.equal(m.r.fallback, false);
    assert.equal(m.r.result.text, m.bytes.quantized);
    assert.ok(m.elapsed < 3000, 'did not wait for the (hanging) decoder');
    assert.equal(count(m.path('meshopt')), 0);
    assert.equal(m.events.length, 1);
    assertEvent(m.events[0], 'mchoice', { variant: 'quantized', decoder: 'none', bytes: 15, fallback: false, reason: null }, m.device);
  });

  it('choice.explore: the share of loads it names (per mille) tries the other variant; options.variant still wins', async () => {
    const exploring = (perMille) => ({ game: { choice: { variant: 'quantized', reason: 'slow_class', detail: '', estimates: [], explore: { variant: 'meshopt', per_mille: perMille } } } });
    const every = await loadModel('mexplore', { config: exploring(1000) });
    assert.equal(every.r.variant, 'meshopt');
    assert.equal(every.r.fallback, false);
    assertEvent(every.events[0], 'mexplore', { variant: 'meshopt', decoder: 'wasm-simd', bytes: 7, fallback: false, reason: null }, every.device);
    const never = await loadModel('mexplore0', { config: exploring(0) });
    assert.equal(never.r.variant, 'quantized');
    const forced = await loadModel('mexploref', { config: exploring(1000), options: { variant: 'quantized' } });
    assert.equal(forced.r.variant, 'quantized');
  });

  it("the ktx2 variant: taken where the game decodes KTX2 and the device's format is one its textures hold on, else the class's choice", async () => {
    const variants = ['meshopt', 'quantized', 'original', 'ktx2'];
    const support = (astc, bptc, etc2) => ({ ktx2: { workerConfig: { astcSupported: astc, bptcSupported: bptc, etc2Supported: etc2 } } });
    const phone = await loadModel('mk2astc', { config: { game: { variants } }, options: support(true, false, true) });
    assert.equal(phone.r.variant, 'ktx2');
    assert.equal(phone.r.result.text, phone.bytes.ktx2);
    assert.equal(phone.r.fallback, false);
    assertEvent(phone.events[0], 'mk2astc', { variant: 'ktx2', decoder: 'wasm-simd', bytes: 12, fallback: false, reason: null }, phone.device);
    assert.equal(count(phone.path('meshopt')), 0);
    // An older phone whose GPU has only ETC2, which the variant's textures do not hold on.
    const old = await loadModel('mk2etc2', { config: { game: { variants } }, options: support(false, false, true) });
    assert.equal(old.r.variant, 'meshopt');
    assert.equal(count(old.path('ktx2')), 0);
    // A game that does not decode KTX2 never gets it, not even as the class's choice.
    const plain = await loadModel('mk2none', { config: { game: { variants, choice: { variant: 'ktx2', reason: '', detail: '', estimates: [] } } } });
    assert.equal(plain.r.variant, 'meshopt');
    assert.equal(count(plain.path('ktx2')), 0);
    // The format named by the game; the class chose quantized.
    const named = await loadModel('mk2fmt', {
      config: { game: { variants, choice: { variant: 'quantized', reason: 'slow_class', detail: '', estimates: [] } } },
      options: { gpuFormat: 'bc7' },
    });
    assert.equal(named.r.variant, 'ktx2');
    // Measured slower on this class (its transcode included): the class's choice instead.
    const slower = await loadModel('mk2slow', {
      config: { game: { variants, choice: { variant: 'quantized', reason: 'measured', detail: '', estimates: [], ktx2: { take: false, reason: 'measured', detail: '' } } } },
      options: support(true, true, true),
    });
    assert.equal(slower.r.variant, 'quantized');
    assert.equal(count(slower.path('ktx2')), 0);
    // Taken (a low-memory class) even where the class's own choice is another variant.
    const low = await loadModel('mk2low', {
      config: { game: { variants, choice: { variant: 'quantized', reason: 'slow_class', detail: '', estimates: [], ktx2: { take: true, reason: 'low_memory_class', detail: '' } } } },
      options: support(true, true, true),
    });
    assert.equal(low.r.variant, 'ktx2');
    // A KTX2 loader the game imports on demand: imported for a model with a ktx2 variant only.
    const lazy = await loadModel('mk2lazy', { config: { game: { variants } }, options: { ktx2: 'lazy' } });
    assert.equal(lazy.r.variant, 'ktx2');
    assert.equal(lazy.ktx2Imports, 1);
    const without = await loadModel('mk2lazyno', { options: { ktx2: 'lazy' } });
    assert.equal(without.r.variant, 'meshopt');
    assert.equal(without.ktx2Imports, 0, 'no ktx2 variant: the KTX2 loader is not imported');
    // A KTX2 the game fails to decode: the fallback, as for any variant that needs a decoder.
    const failing = await loadModel('mk2fail', { parse: 'ktx2Throws', config: { game: { variants } }, options: support(true, true, true) });
    assert.equal(failing.r.variant, 'quantized');
    assert.equal(failing.r.fallback, true);
    assert.equal(failing.r.reason, 'decode_failed');
    assert.deepEqual(failing.parsed, ['ktx2', 'quantized']);
  });

  it('options.variant forces a variant; options.decoderKind names the decoder; a decoder may be a function', async () => {
    const forced = await loadModel('mforce', { options: { variant: 'original' } });
    assert.equal(forced.r.variant, 'original');
    assert.equal(forced.r.result.text, forced.bytes.original);
    const named = await loadModel('mkind', { decoder: 'fn', parse: 'async', options: { decoderKind: 'js' } });
    assert.equal(named.r.variant, 'meshopt');
    assert.equal(named.r.decoder, 'js');
    assert.ok(named.r.ms >= 25, `async parse is timed to its end (${named.r.ms} ms)`);
    assert.equal(named.events[0].decoder, 'js');
  });

  it('decoder ready rejects: the quantized variant is loaded and the fallback reported (decoder_init_failed)', async () => {
    const m = await loadModel('mreject', { decoder: 'reject' });
    assert.equal(m.r.variant, 'quantized');
    assert.equal(m.r.fallback, true);
    assert.equal(m.r.reason, 'decoder_init_failed');
    assert.equal(m.r.decoder, 'none');
    assert.equal(m.r.result.text, m.bytes.quantized);
    assert.deepEqual(m.parsed, ['quantized']);
    assert.equal(count(m.path('meshopt')), 0, 'the meshopt bytes were never fetched');
    assert.equal(count(m.path('quantized')), 1);
    assert.equal(m.events.length, 1);
    assertEvent(m.events[0], 'mreject', { variant: 'quantized', decoder: 'none', bytes: 15, fallback: true, reason: 'decoder_init_failed' }, m.device);
    await assertBeaconsMatch('mreject', m.page);
    assert.deepEqual(m.page.errors, []);
  });

  it('a decoder function that rejects or throws, or a decoder that is not supported: decoder_init_failed', async () => {
    for (const decoder of ['rejectfn', 'throwfn', 'unsupported']) {
      const m = await loadModel(`m${decoder}`, { decoder });
      assert.equal(m.r.variant, 'quantized', decoder);
      assert.equal(m.r.reason, 'decoder_init_failed', decoder);
      assert.equal(m.events[0].fallback, true);
    }
  });

  it('decoder never ready: falls back after the decoder timeout (decoder_timeout)', async () => {
    const m = await loadModel('mhang', { decoder: 'hang', options: { decoderTimeoutMs: 300 } });
    assert.equal(m.r.variant, 'quantized');
    assert.equal(m.r.reason, 'decoder_timeout');
    assert.ok(m.elapsed < 3000, `fell back in ${m.elapsed} ms`);
    assertEvent(m.events[0], 'mhang', { variant: 'quantized', decoder: 'none', bytes: 15, fallback: true, reason: 'decoder_timeout' }, m.device);
    const c = await loadModel('mhangcfg', { decoder: 'hang', config: { kiln: { decoderTimeoutMs: 200 } } });
    assert.equal(c.r.reason, 'decoder_timeout', 'configure({decoderTimeoutMs})');
  });

  it('parse throws for meshopt: retried once with the fallback variant (decode_failed)', async () => {
    const m = await loadModel('mparse', { parse: 'meshoptThrows' });
    assert.equal(m.r.variant, 'quantized');
    assert.equal(m.r.fallback, true);
    assert.equal(m.r.reason, 'decode_failed');
    assert.deepEqual(m.parsed, ['meshopt', 'quantized']);
    assert.equal(count(m.path('meshopt')), 1);
    assert.equal(count(m.path('quantized')), 1);
    assert.equal(m.events.length, 1);
    assertEvent(m.events[0], 'mparse', { variant: 'quantized', decoder: 'none', bytes: 15, fallback: true, reason: 'decode_failed' }, m.device);
  });

  it('a device that cannot decode the variants\' textures (WebP) gets the original as uploaded', async () => {
    const m = await loadModel('mtex', { parse: 'onlyOriginal' });
    assert.equal(m.r.variant, 'original');
    assert.equal(m.r.fallback, true);
    assert.equal(m.r.reason, 'decode_failed');
    assert.deepEqual(m.parsed, ['meshopt', 'quantized', 'original']);
    assert.deepEqual(m.events.map((e) => [e.variant, e.ms === null, e.reason]),
      [['quantized', true, 'decode_failed'], ['original', false, 'decode_failed']]);
  });

  it('no decoder given for a variant that needs one: no_decoder', async () => {
    const m = await loadModel('mnodec', { decoder: 'none' });
    assert.equal(m.r.variant, 'quantized');
    assert.equal(m.r.reason, 'no_decoder');
    assertEvent(m.events[0], 'mnodec', { variant: 'quantized', decoder: 'none', bytes: 15, fallback: true, reason: 'no_decoder' }, m.device);
  });

  it('without parse: resolves with the bytes; no decode event, except for a fallback (ms null)', async () => {
    const m = await loadModel('mnoparse', { parse: 'none' });
    assert.equal(m.r.variant, 'meshopt');
    assert.equal(m.r.ms, null);
    assert.deepEqual(m.r.result, { arrayBuffer: m.bytes.meshopt });
    assert.equal(m.r.bytes, 7);
    assert.deepEqual(m.events, []);
    const f = await loadModel('mnoparsefb', { parse: 'none', decoder: 'reject' });
    assert.equal(f.r.variant, 'quantized');
    assert.deepEqual(f.r.result, { arrayBuffer: f.bytes.quantized });
    assert.equal(f.events.length, 1);
    assertEvent(f.events[0], 'mnoparsefb', { variant: 'quantized', decoder: 'none', bytes: 15, fallback: true, reason: 'decoder_init_failed', measured: false }, f.device);
  });

  it('no fallback variant in the manifest: original; no usable fallback at all: rejects with a reason', async () => {
    const o = await loadModel('mnofb', { decoder: 'reject', config: { game: { variants: ['meshopt', 'original'], fallback: 'meshopt' } } });
    assert.equal(o.r.variant, 'original');
    assert.equal(o.r.reason, 'decoder_init_failed');
    const none = await loadModel('mnone', { decoder: 'reject', config: { game: { variants: ['meshopt'] } } });
    assert.equal(none.rejected, 'decoder_init_failed');
    assert.equal(none.isError, true);
    const gone = await loadModel('mgone', { decoder: 'reject', config: { game: { missing: ['quantized'] } } });
    assert.equal(gone.rejected, 'error', gone.message);
    const bad = await loadModel('mbad', { decoder: 'reject', parse: 'alwaysThrows' });
    assert.equal(bad.rejected, 'decode_failed');
    assert.equal(bad.events.length, 2, 'both fallbacks happened: reported, unmeasured');
    assert.deepEqual(bad.events.map((e) => [e.variant, e.ms, e.reason]),
      [['quantized', null, 'decoder_init_failed'], ['original', null, 'decode_failed']]);
    const unknown = await bad.page.evaluate(() => kiln.model('nope.glb').then(() => 'ok', (e) => e.reason));
    assert.equal(unknown, 'error');
  });

  it('a model asked for while its manifest is still being verified waits for it', async () => {
    const g = modelGame('mearly');
    const p = await open('mearly');
    const v = await p.evaluate(([u, keys]) => {
      kiln.preheat(u, { keys });
      return kiln.model('./assets/fox.glb', { variant: 'quantized' }).then((r) => r.variant);
    }, [g.url, srv.trusted]);
    assert.equal(v, 'quantized');
  });
});
