/* Kiln loader: verified engines from the shared offline library. Plain ES2017, no dependencies.
 * API and security model: api/sdk/README.md. Served verbatim at /sdk/kiln-loader.js. */
(function (G) {
  'use strict';
  if (!G || (G.kiln && G.kiln.version)) return;

  var CACHE = 'kiln-library-v1', INDEX = 'kiln:lib', SEQ = 'kiln:seq:', KEPT = 'kiln:manifest:', KCLASS = 'kiln:class', TRUST = 'kiln:trust:', INDEX_MAX = 64;
  var CLASS = /^(ios-high|ios-low|android-high|android-mid|android-low|desktop|unknown)$/;
  var DESC = ['os', 'os_version', 'runtime', 'model', 'memory', 'cores'];
  var doc = typeof document !== 'undefined' && document && document.createElement ? document : null;
  var nav = G.navigator || {};
  var S = { keys: [], telemetry: null, game: null, timeoutMs: 10000, decoderTimeoutMs: 5000, deviceClass: null, device: null };
  // Loaded from a Kiln (…/sdk/kiln-loader.js): beacons go to that Kiln unless configured.
  var src = doc && doc.currentScript && doc.currentScript.src;
  if (src && /\/sdk\/kiln-loader\.js([?#].*)?$/.test(src)) {
    S.telemetry = src.replace(/\/sdk\/kiln-loader\.js([?#].*)?$/, '/v1/telemetry');
  }
  var events = [], queue = [], loads = {}, reported = {}, known = {}, bootDesc = {}, demands = {};
  var pending = [], blobs = {}, marks = {}, markId = 0, dev = null, srvClass = null, models = {}, simd, importFn, booted = false;
  var held = {}, holding = false, dclSeen = false, domWaiters = [], warmed = {}, picks = {};
  var readyDone, readyFail;
  var ready = new Promise(function (y, n) { readyDone = y; readyFail = n; });
  ready.catch(noop);

  function noop() {}
  function now() { return G.performance && G.performance.now ? G.performance.now() : Date.now(); }
  function r1(ms) { return Math.round(ms * 10) / 10; }
  function fail(reason, message) { var e = new Error('kiln: ' + message); e.reason = reason; return e; }
  function why(e, dflt) { return (e && e.reason) || dflt || 'error'; }
  function subtle() { return G.crypto && G.crypto.subtle && G.crypto.subtle.digest ? G.crypto.subtle : null; }
  function hasCaches() { return !!(G.caches && G.caches.open); }
  function assign(to, from) { for (var k in from) if (from[k] != null) to[k] = from[k]; return to; }

  // ---- storage (localStorage may be missing or throw) ----
  function item(key, v) {
    try { if (v === undefined) return G.localStorage.getItem(key); G.localStorage.setItem(key, v); } catch (e) { /* full or blocked */ }
    return null;
  }
  function stored(key) { try { return JSON.parse(item(key)); } catch (e) { return null; } }
  function save(key, v) { item(key, JSON.stringify(v)); }

  // ---- bytes ----
  var B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  function b64enc(b) {
    var s = '';
    for (var i = 0; i < b.length; i += 3) {
      var n = b[i] << 16 | (b[i + 1] || 0) << 8 | (b[i + 2] || 0);
      s += B64[n >> 18 & 63] + B64[n >> 12 & 63] + (i + 1 < b.length ? B64[n >> 6 & 63] : '=') + (i + 2 < b.length ? B64[n & 63] : '=');
    }
    return s;
  }
  function b64dec(s) {
    s = String(s).replace(/-/g, '+').replace(/_/g, '/').replace(/=+$/, '');
    var out = [], buf = 0, bits = 0;
    for (var i = 0; i < s.length; i++) {
      var v = B64.indexOf(s[i]);
      if (v < 0) return null;
      buf = (buf << 6 | v) & 0xffffff; bits += 6;
      if (bits >= 8) { bits -= 8; out.push(buf >> bits & 255); }
    }
    return new Uint8Array(out);
  }
  function hex(buf) {
    var b = new Uint8Array(buf), s = '';
    for (var i = 0; i < b.length; i++) s += (b[i] < 16 ? '0' : '') + b[i].toString(16);
    return s;
  }
  function unhex(h) {
    var b = new Uint8Array(h.length >> 1);
    for (var i = 0; i < b.length; i++) b[i] = parseInt(h.substr(i * 2, 2), 16);
    return b;
  }
  function utf8(b) {
    if (G.TextDecoder) return new G.TextDecoder().decode(b);
    var s = '';
    for (var i = 0; i < b.length; i++) s += String.fromCharCode(b[i]);
    return decodeURIComponent(escape(s));
  }
  function sha256ok(bytes, d) {
    if (typeof d.size === 'number' && d.size !== bytes.length) return Promise.resolve(false);
    return subtle().digest('SHA-256', bytes).then(function (h) { return hex(h) === d.sha256; });
  }

  // ---- network with a deadline ----
  function timed(fn) {
    var ctl = G.AbortController ? new G.AbortController() : null;
    return new Promise(function (resolve, reject) {
      var t = setTimeout(function () {
        try { if (ctl) ctl.abort(); } catch (e) { /* ignore */ }
        reject(fail('timeout', 'no answer within ' + S.timeoutMs + ' ms'));
      }, S.timeoutMs);
      Promise.resolve().then(function () { return fn(ctl && ctl.signal); }).then(function (v) {
        clearTimeout(t); resolve(v);
      }, function (e) {
        clearTimeout(t); reject(e && e.reason ? e : fail('error', String(e && e.message || e)));
      });
    });
  }
  function fetchBytes(url) {
    if (typeof G.fetch !== 'function') return Promise.reject(fail('unsupported', 'no fetch'));
    return timed(function (signal) {
      return G.fetch(url, signal ? { signal: signal } : {}).then(function (res) {
        if (!res.ok) throw fail('error', 'HTTP ' + res.status + ' from ' + url);
        return res.arrayBuffer().then(function (b) { return { res: res, bytes: new Uint8Array(b) }; });
      });
    });
  }

  // ---- telemetry ----
  function emit(ev) {
    events.push(ev);
    if (!queue.length) setTimeout(flush, 0);
    queue.push(ev);
  }
  // Each game's beacon token (from its newest verified manifest): Kiln counts a beacon in
  // its decisions only with it (docs/telemetry.md).
  var tokens = {};
  function tokened(ev) {
    var t = ev && tokens[ev.game], out = {}, k;
    if (!t || ev.beacon) return ev;
    for (k in ev) out[k] = ev[k];
    out.beacon = t;
    return out;
  }
  var tokenWait = false;
  function flush(force) {
    var batch = queue, url = S.telemetry;
    // A manifest being verified brings its game's token: wait for it (never at pagehide).
    if (force !== true && url && pending.length && batch.some(function (e) { return !tokens[e.game]; })) {
      if (!tokenWait) {
        tokenWait = true;
        Promise.all(pending.map(function (p) { return p.then(noop, noop); })).then(function () { tokenWait = false; flush(true); });
      }
      return;
    }
    queue = [];
    if (!batch.length || !url) return;
    var body = JSON.stringify({ events: batch.map(tokened) });
    try { if (nav.sendBeacon && nav.sendBeacon(url, body)) return; } catch (e) { /* fall through */ }
    try {
      G.fetch(url, { method: 'POST', body: body, keepalive: true, headers: { 'content-type': 'text/plain' } }).catch(noop);
    } catch (e) { /* no transport: the events stay in kiln.events */ }
  }
  function cls(c) { return typeof c === 'string' && CLASS.test(c) ? c : null; }
  // The class to ask the server for: forced, else what the server said (this page or before).
  function knownClass() { return S.deviceClass || srvClass || cls(item(KCLASS)); }
  function device() {
    if (dev) return dev;
    var ua = String(nav.userAgent || ''), os = 'other', ver = null, model = null, m;
    var mem = typeof nav.deviceMemory === 'number' ? nav.deviceMemory : null;
    var cores = typeof nav.hardwareConcurrency === 'number' ? nav.hardwareConcurrency : null;
    if ((m = /(iPhone|iPad|iPod)/.exec(ua)) || (/Macintosh/.test(ua) && nav.maxTouchPoints > 1)) {
      os = 'ios'; model = m ? m[1] : 'iPad';
      m = /OS (\d+)[_.](\d+)/.exec(ua) || /Version\/(\d+)\.(\d+)/.exec(ua);
    } else if ((m = /OpenHarmony ([\d.]+)/.exec(ua))) {
      os = 'harmonyos';
    } else if ((m = /Android ([\d.]+)/.exec(ua))) {
      os = 'android';
      var md = /Android [\d.]+; (?:[a-z]{2}[-_][a-zA-Z]{2}; )?([^;)]+?)(?: Build\/|;|\))/.exec(ua);
      model = md ? md[1] : null;
    } else if ((m = /Windows NT ([\d.]+)/.exec(ua))) os = 'windows';
    else if ((m = /Mac OS X (\d+)[_.](\d+)/.exec(ua))) os = 'macos';
    else if (/CrOS/.test(ua)) os = 'chromeos';
    else if (/Linux/.test(ua)) os = 'linux';
    if (m) ver = m[2] !== undefined ? m[1] + '.' + m[2] : m[1];
    var rt = !doc ? (G.wx ? 'wechat-minigame' : G.tt ? 'bytedance-minigame' : 'minigame')
      : /MicroMessenger/i.test(ua) ? 'wechat'
      : /FBAN|FBAV/.test(ua) ? 'facebook'
      : /Instagram/.test(ua) ? 'instagram'
      : /musical_ly|TikTok|Bytedance|aweme/i.test(ua) ? 'tiktok'
      : /EdgA?\/|EdgiOS/.test(ua) ? 'edge'
      : /SamsungBrowser/.test(ua) ? 'samsung'
      : /Firefox|FxiOS/.test(ua) ? 'firefox'
      : /CriOS/.test(ua) ? 'chrome'
      : os === 'android' && /; wv\)/.test(ua) ? 'android-webview'
      : /Chrome\//.test(ua) ? 'chrome'
      : os === 'ios' && !/Safari\//.test(ua) ? 'ios-webview'
      : /Safari\//.test(ua) ? 'safari' : 'other';
    var d = { 'class': null, os: os, os_version: ver, runtime: rt, model: model, memory: mem, cores: cores }, h = S.device || {};
    // A host's descriptor (mini-game system info) beats what the user agent says.
    DESC.forEach(function (k) { if (h[k] != null) d[k] = h[k]; });
    os = String(d.os).toLowerCase(); mem = d.memory; cores = d.cores;
    var major = parseInt(d.os_version, 10) || 0, c = 'desktop';
    if (os === 'ios') c = major >= 16 && !(cores && cores < 4) ? 'ios-high' : 'ios-low';
    else if (os === 'android' || os === 'harmonyos') {
      if (mem) c = mem >= 8 ? 'android-high' : mem >= 4 ? 'android-mid' : 'android-low';
      else c = cores && cores <= 4 ? 'android-low' : 'android-mid';
      if (os === 'android' && major && major < 9) c = 'android-low';
    }
    d['class'] = knownClass() || cls(h['class']) || c;
    return (dev = d);
  }
  // `shared`: a hit this game's own visits did not bring (another game's visit put it there).
  function engineEvent(d, outcome, reason, ms, prewarmed, shared) {
    reported[d.sha256] = true;
    emit({
      type: 'preheat', game: d.game || S.game, engine: d.name, version: d.version, outcome: outcome,
      reason: outcome === 'hit' ? null : reason || null, ms: r1(ms), prewarmed: !!prewarmed,
      shared: outcome === 'hit' && !!shared, bytes: typeof d.size === 'number' ? d.size : null, device: device()
    });
  }

  // ---- the library index (what this device ever cached) ----
  function classify(d) {
    var idx = stored(INDEX) || {};
    if (idx[d.sha256]) return 'evicted';
    for (var k in idx) if (idx[k] && idx[k].name === d.name) return 'version_mismatch';
    return 'cold';
  }
  // The games that ever used this copy on this device, and what brought it first.
  function sharedHit(d, game) {
    var e = (stored(INDEX) || {})[d.sha256];
    return !!(e && e.games && e.games.length && e.games.indexOf(game) < 0);
  }
  function remember(d, by) {
    var idx = stored(INDEX) || {}, old = idx[d.sha256] || {}, games = (old.games || []).slice(), g = d.game || S.game;
    if (g && games.indexOf(g) < 0) games.push(g);
    while (games.length > 16) games.shift();
    idx[d.sha256] = { name: d.name, version: d.version, at: Date.now(), games: games, by: old.by || by || 'page' };
    var keys = Object.keys(idx).sort(function (a, b) { return (idx[a].at || 0) - (idx[b].at || 0); });
    while (keys.length > INDEX_MAX) delete idx[keys.shift()];
    save(INDEX, idx);
  }

  // ---- evaluation ----
  function parent() { return doc.head || doc.documentElement || doc.body; }
  function scriptEl(src, module, sha) {
    return new Promise(function (resolve, reject) {
      var s = doc.createElement('script');
      if (module) s.type = 'module';
      if (sha) { s.setAttribute('integrity', 'sha256-' + b64enc(unhex(sha))); s.crossOrigin = 'anonymous'; }
      var t = setTimeout(function () { reject(fail('timeout', 'script ' + src + ' did not load')); }, S.timeoutMs);
      s.onload = function () { clearTimeout(t); resolve(); };
      s.onerror = function () { clearTimeout(t); reject(fail('error', 'script ' + src + ' failed')); };
      s.src = src;
      parent().appendChild(s);
    });
  }
  function dynImport(url) {
    if (importFn === undefined) {
      // Through Function so the file still parses where import() is a syntax error.
      try { importFn = new Function('u', 'return import(u)'); } catch (e) { importFn = null; }
    }
    return importFn ? importFn(url) : Promise.reject(fail('unsupported', 'no dynamic import'));
  }
  function global(d) {
    if (!d.global) return undefined;
    var v = G, parts = d.global.split('.');
    for (var i = 0; i < parts.length && v != null; i++) v = v[parts[i]];
    if (v === undefined) { var e = fail('error', d.name + ' ran but defined no ' + d.global); e.ran = true; throw e; }
    return v;
  }
  function blobUrl(bytes) { return URL.createObjectURL(new Blob([bytes], { type: 'text/javascript' })); }
  // Only ever called with bytes whose SHA-256 matched. Always a promise, even if something throws.
  function evaluate(d, bytes, hook) {
    return new Promise(function (y) { y(run(d, bytes, hook)); });
  }
  function run(d, bytes, hook) {
    if (d.module) {
      var url = blobUrl(bytes);
      blobs[d.sha256] = url;
      return Promise.resolve(hook && hook(d, url)).then(function () { return dynImport(url); });
    }
    if (!doc) {
      var code = utf8(bytes);
      try { (0, eval)(code); } catch (e) { e.ran = true; throw e; } // eslint-disable-line no-eval
      return global(d);
    }
    var u = blobUrl(bytes);
    return scriptEl(u).then(function () { URL.revokeObjectURL(u); return global(d); });
  }
  function fallback(d, reason, hook) {
    return fallbackLoad(d, hook).then(function (v) {
      return { value: v, outcome: 'fallback', reason: reason };
    }, function (e) {
      var err = fail(why(e), 'fallback for ' + d.name + ' failed: ' + e.message);
      err.outcome = 'error';
      throw err;
    });
  }
  function fetchVerified(url, d) {
    return fetchBytes(url).then(function (r) {
      return sha256ok(r.bytes, d).then(function (ok) {
        if (!ok) throw fail('integrity_failed', url + ' does not match sha256 ' + d.sha256);
        return r.bytes;
      });
    });
  }
  function fallbackLoad(d, hook) {
    var url = d.fallback;
    if (!url) return Promise.reject(fail('error', 'no fallback copy'));
    if (doc && (!d.module || !subtle())) {
      // SRI: the browser checks the hash itself, so this works without crypto.subtle.
      return scriptEl(url, d.module, d.sha256).then(function () {
        return d.module ? dynImport(url) : global(d); // a module is already in the module map, verified
      }, function (e) {
        if (e.reason !== 'error' || !subtle()) throw e;
        return fetchVerified(url, d).then(function () { throw e; }); // tells integrity_failed from error
      });
    }
    if (!subtle()) return Promise.reject(fail('unsupported', 'cannot verify ' + url));
    return fetchVerified(url, d).then(function (bytes) { return evaluate(d, bytes, hook); });
  }

  // Library (Cache Storage, then network), verified, then evaluated; else the fallback copy.
  function loadNow(d, hook, by) {
    if (!subtle()) return fallback(d, 'unsupported', hook);
    var cache = null, got = null, reason = null;
    var lookup = !hasCaches() ? Promise.resolve((reason = 'unsupported', null)) : timed(function () {
      return G.caches.open(CACHE).then(function (c) {
        cache = c;
        return c.match(d.url);
      }).then(function (res) { return res ? res.arrayBuffer() : null; });
    }).then(function (buf) {
      if (!buf) return null;
      var b = new Uint8Array(buf);
      return sha256ok(b, d).then(function (ok) {
        if (ok) return (got = b);
        reason = 'integrity_failed';
        cache.delete(d.url).catch(noop);
        return null;
      });
    }, function (e) { reason = why(e); });
    return lookup.then(function () {
      if (got) return 'hit';
      reason = reason || classify(d);
      return fetchVerified(d.url, d).then(function (b) {
        got = b;
        if (!cache) return 'miss';
        return cache.put(d.url, new Response(b, { headers: { 'content-type': 'text/javascript' } }))
          .then(function () { remember(d, by); }, noop).then(function () { return 'miss'; });
      });
    }).then(function (outcome) {
      return evaluate(d, got, hook).then(function (v) {
        return { value: v, outcome: outcome, reason: outcome === 'hit' ? null : reason };
      }, function (e) {
        if (e.ran) { e.outcome = 'error'; throw e; } // it ran: running the same code again won't help
        return fallback(d, 'error', hook);
      });
    }, function (e) {
      return fallback(d, why(e), hook);
    });
  }
  function load(d, hook, by) {
    var rec = loads[d.sha256];
    if (rec) return rec;
    rec = loads[d.sha256] = { d: d, by: by, t0: now(), done: false };
    rec.p = loadNow(d, hook, by).then(function (r) {
      rec.done = true; rec.t1 = now(); rec.r = r; return r;
    }, function (e) {
      rec.done = true; rec.t1 = now(); rec.e = e; throw e;
    });
    rec.p.catch(noop);
    return rec;
  }

  // ---- engine descriptors ----
  function abs(u) {
    try { return new URL(u, doc ? doc.baseURI : G.location && G.location.href).href; } catch (e) { return u; }
  }
  function norm(e, game, fromPage) {
    if (!e || typeof e.name !== 'string' || !/^[0-9a-fA-F]{64}$/.test(e.sha256 || '') || typeof e.url !== 'string') return null;
    return {
      name: e.name, version: e.version == null ? null : String(e.version), sha256: e.sha256.toLowerCase(),
      size: e.size, url: e.url, path: e.path || null, global: e.global || null, module: !!e.module, game: game,
      fallback: (fromPage && e.path ? abs(e.path) : e.fallback_url) || null
    };
  }
  // What get() finds, once no manifest that might hold it is still being verified.
  function settled(get) {
    var v = get();
    if (v || !pending.length) return Promise.resolve(v);
    return Promise.all(pending.map(function (p) { return p.catch(noop); })).then(function () { return settled(get); });
  }
  function describe(name) {
    return settled(function () { return bootDesc[name] || known[name]; });
  }
  // A host on another origin (a lobby) that pre-warmed the game opens it with
  // #kiln-prewarmed=<its Date.now()> (kiln.prewarmedUrl): it cannot write this origin's storage,
  // so the claim is how its hits are labelled prewarmed. Trusted for that label only, only for
  // an engine the HTTP or library cache did serve, and only within 10 minutes of the claim;
  // the fragment is taken off the address so a reload or a shared link does not claim again.
  var CLAIM_MS = 600000;
  var lobbyClaim = (function () {
    try {
      var loc = G.location, h = loc && loc.hash, m = h && /(^#|&)kiln-prewarmed=(\d+)(?=&|$)/.exec(h);
      if (!m) return false;
      var rest = h.slice(1).split('&').filter(function (x) { return x.indexOf('kiln-prewarmed=') !== 0; }).join('&');
      if (G.history && G.history.replaceState) G.history.replaceState(G.history.state, '', loc.pathname + loc.search + (rest ? '#' + rest : ''));
      var age = Date.now() - Number(m[2]);
      return age >= -60000 && age <= CLAIM_MS;
    } catch (e) { return false; }
  })();
  function prewarmedUrl(url) {
    var u = String(url);
    return u + (u.indexOf('#') < 0 ? '#' : '&') + 'kiln-prewarmed=' + Date.now();
  }
  function demand(name, hook) {
    var t0 = now();
    return describe(name).then(function (d) {
      if (!d) throw fail('error', 'unknown engine ' + name);
      var before = loads[d.sha256];
      var pre = before && before.by === 'preheat' && before.done;
      var rec = load(d, hook, 'engine');
      var shared = sharedHit(d, d.game || S.game);
      return rec.p.then(function (r) {
        var hit = pre && r.outcome !== 'fallback';
        engineEvent(d, hit ? 'hit' : r.outcome, hit ? null : r.reason, now() - t0, pre || (lobbyClaim && r.outcome === 'hit'), shared);
        if (r.outcome !== 'fallback') remember(d);
        return r.value;
      }, function (e) {
        engineEvent(d, 'error', why(e), now() - t0, false);
        throw e;
      });
    });
  }
  function engine(name) {
    return demands[name] || (demands[name] = demand(name));
  }

  // ---- manifests ----
  function parseSig(h) {
    if (!h) return null;
    var kid = null, sig = null, parts = String(h).split(',');
    for (var i = 0; i < parts.length; i++) {
      var p = parts[i].trim(), at = p.indexOf('=');
      if (at < 0) return null;
      var k = p.slice(0, at), v = p.slice(at + 1);
      if (k === 'keyid') kid = v;
      else if (k === 'sig') sig = b64dec(v);
    }
    return kid && sig ? { kid: kid, sig: sig } : null;
  }
  function gameOf(url) { var m = /\/games\/([^/?#]+)\/manifest/.exec(url); return m ? decodeURIComponent(m[1]) : null; }
  // A manifest URL without a query of its own asks for this device's manifest. Kiln reads memory
  // as a number and cores as an integer: anything else is left out rather than refused.
  function withDevice(url) {
    if (/[?#]/.test(url)) return url;
    var c = knownClass(), d = device(), q = [];
    if (c) q.push('device=' + c);
    else DESC.forEach(function (k) {
      var v = d[k];
      if (k === 'memory' || k === 'cores') v = v === null || v === '' || !(+v >= 0 && +v < 1e6) ? null : k === 'cores' ? Math.floor(v) : +v;
      if (v != null) q.push(k + '=' + encodeURIComponent(v));
    });
    return q.length ? url + '?' + q.join('&') : url;
  }
  function verify(url, opts, learn) {
    return fetchBytes(url).then(function (r) {
      return check(r.bytes, r.res.headers.get('kiln-signature'), r.res.headers.get('kiln-device-class'), opts, learn, url);
    });
  }
  function byKid(keys, kid) { for (var i = 0; i < keys.length; i++) if (keys[i] && keys[i].kid === kid) return keys[i]; return null; }
  function edVerify(s, jwk, sig, bytes) {
    return s.importKey('jwk', { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, { name: 'Ed25519' }, false, ['verify']).then(function (key) {
      return sig.length === 64 && s.verify({ name: 'Ed25519' }, key, sig, bytes);
    });
  }
  // A trust document ({signed, signatures}) signed by one of the pinned keys: the document, else
  // why not: 'unknown_key' (no pinned key signed it), 'bad_trust' (a pinned key's signature fails).
  function trustDoc(s, text, pins) {
    var env, bytes, sigs, why = 'unknown_key';
    try { env = JSON.parse(text); bytes = new G.TextEncoder().encode(env.signed); sigs = env.signatures.slice(); } catch (e) { return Promise.resolve('bad_trust'); }
    return (function next() {
      var x = sigs.shift(), jwk = x && byKid(pins, x.keyid), sig = jwk && b64dec(x.sig);
      if (!x) return why;
      if (jwk) why = 'bad_trust';
      return (sig ? edVerify(s, jwk, sig, bytes) : Promise.resolve(false)).then(function (ok) {
        var d = null;
        try { d = ok && JSON.parse(env.signed); } catch (e) { /* signed, but not a document */ }
        return d && d.version >= 0 && Array.isArray(d.keys) ? d : next();
      }, next);
    })();
  }
  // The key `kid` as the trust document beside the manifest (same base URL) lists it: verified
  // by a pinned root, unexpired, not older than the one this device verified before.
  function trusted(s, url, kid, pins) {
    var base = String(url).replace(/\/v1\/games\/.*$/, ''), at = TRUST + base, text;
    return fetchBytes(base + '/v1/keys/trust').then(function (r) {
      text = utf8(r.bytes);
      return Promise.all([trustDoc(s, text, pins), trustDoc(s, item(at), pins)]);
    }, function (e) {
      throw e.reason === 'error' ? fail('unknown_key', 'no trusted key ' + kid + ' (' + e.message + ')') : e;
    }).then(function (r) {
      var d = r[0], seen = r[1].version, k;
      if (!d.keys) throw fail(d, 'no trust document for ' + kid + ' signed by a pinned key');
      if (!(Date.parse(d.expires) > Date.now())) throw fail('trust_expired', 'trust document expired at ' + d.expires);
      if (d.version < seen) throw fail('trust_rollback', 'trust document ' + d.version + ' is older than ' + seen);
      item(at, text);
      if ((d.revoked || []).indexOf(kid) >= 0) throw fail('revoked_key', 'key ' + kid + ' is revoked');
      for (var i = 0; i < d.keys.length; i++) if ((k = d.keys[i]) && k.jwk && k.jwk.kid === kid) return k.jwk;
      throw fail('unknown_key', 'no trusted key ' + kid);
    });
  }
  // Resolves when `bytes` carry a valid signature (`sigHeader`) by one of `keys`, or by a key the
  // trust document beside `url` (a manifest URL) lists, verified by one of `keys` as a root.
  function verifySig(bytes, sigHeader, keys, url) {
    var s = subtle(), sig;
    if (!s) return Promise.reject(fail('unsupported', 'no crypto.subtle'));
    return Promise.resolve().then(function () {
      sig = parseSig(sigHeader);
      if (!sig) throw fail('bad_signature', 'missing or unreadable Kiln-Signature');
      var jwk = byKid(keys, sig.kid);
      if (!jwk && !(url && G.TextEncoder)) throw fail('unknown_key', 'no trusted key ' + sig.kid);
      return jwk || trusted(s, url, sig.kid, keys);
    }).then(function (jwk) {
      return edVerify(s, jwk, sig.sig, bytes).catch(function (e) {
        throw fail(e && e.name === 'NotSupportedError' ? 'unsupported' : 'unknown_key', 'key ' + sig.kid + ': ' + (e && e.message));
      });
    }).then(function (ok) {
      if (!ok) throw fail('bad_signature', 'signature does not verify');
    });
  }
  // The highest sequence this device has seen for `game`. Every game on the content origin
  // shares its localStorage, so the record is the signed manifest itself, verified here: a
  // record another page wrote (a bare number, a forged or unsigned body, another game's
  // manifest) proves nothing and counts as 0.
  function seenSequence(game, keys, url) {
    var w = stored(SEQ + game);
    if (!w || typeof w.body !== 'string' || typeof w.sig !== 'string' || !G.TextEncoder) return Promise.resolve(0);
    return verifySig(new G.TextEncoder().encode(w.body), w.sig, keys, url).then(function () {
      var m = JSON.parse(w.body);
      return m && m.game === game && m.sequence >= 0 && Math.floor(m.sequence) === m.sequence ? m.sequence : 0;
    }).catch(function () { return 0; });
  }
  // A manifest's bytes and signature, checked: trusted key (pinned, or listed by the trust
  // document a pinned root signed), signature, schema, game, expiry, sequence (never older than
  // one this device saw). Kept for the next visit when `learn`.
  function check(bytes, sigHeader, classHeader, opts, learn, url) {
    var keys = opts.keys || S.keys || [], got = { bytes: bytes }, m;
    return verifySig(bytes, sigHeader, keys, url).then(function () {
      try { m = JSON.parse(utf8(got.bytes)); } catch (e) { throw fail('malformed', 'not JSON'); }
      if (!m || m.schema !== 1 || typeof m.game !== 'string' || !(m.sequence >= 0) || Math.floor(m.sequence) !== m.sequence ||
          isNaN(Date.parse(m.expires)) || (m.engines != null && !Array.isArray(m.engines)) ||
          (m.models != null && !Array.isArray(m.models)) || (opts.game && opts.game !== m.game)) {
        throw fail('malformed', 'not a schema 1 manifest' + (opts.game ? ' of ' + opts.game : ''));
      }
      if (Date.parse(m.expires) <= Date.now()) throw fail('expired', 'expired at ' + m.expires);
      return seenSequence(m.game, keys, url);
    }).then(function (seen) {
      if (m.sequence < seen) throw fail('rollback', 'sequence ' + m.sequence + ' is older than ' + seen);
      if (m.sequence > seen) save(SEQ + m.game, { body: utf8(got.bytes), sig: sigHeader });
      // The class the server used (signed body first, then its header); 'unknown' teaches nothing.
      var c = cls(m.device_class) || cls(classHeader);
      if (learn && c && c !== 'unknown' && !S.deviceClass) { srvClass = c; item(KCLASS, c); dev = null; }
      if (learn && opts.keep) save(KEPT + m.game, { body: utf8(got.bytes), sig: sigHeader, cls: classHeader || null });
      return m;
    });
  }
  // The manifest this device verified last for `game`, if it is of `build`: checked again
  // (signature, expiry, sequence) and used at once, while the fresh one is fetched.
  function kept(game, build, opts, url) {
    var k = stored(KEPT + game), m0;
    if (!k || typeof k.body !== 'string' || !G.TextEncoder) return null;
    try { m0 = JSON.parse(k.body); } catch (e) { return null; }
    if (!m0 || m0.build_id !== build) return null;
    return check(new G.TextEncoder().encode(k.body), k.sig, k.cls, opts, false, url);
  }
  // This device's manifest, verified; its engines and models become known.
  function manifestOf(url, opts, first) {
    var q = withDevice(url), p = (first || Promise.resolve()).then(function () { return verify(q, opts, q !== url); });
    pending.push(p);
    p.then(done, done);
    function done() { pending.splice(pending.indexOf(p), 1); }
    return p.then(learnManifest);
  }
  function learnManifest(m) {
      var ds = [], t = tokens[m.game];
      if (m.beacon && typeof m.beacon.token === 'string' && (!t || t.sequence <= m.sequence)) {
        tokens[m.game] = { token: m.beacon.token, sequence: m.sequence, expires: m.beacon.expires };
      }
      (m.engines || []).forEach(function (e) {
        var d = norm(e, m.game, false);
        if (d) { ds.push(d); known[d.name] = d; }
      });
      (m.models || []).forEach(function (x) {
        if (!x || typeof x.path !== 'string' || !Array.isArray(x.variants)) return;
        models[m.game + ' ' + mkey(x.path)] = models[' ' + mkey(x.path)] = { game: m.game, m: x };
        // What a rewritten page of this game fetches first next time (kiln-boot.js).
        if (m.device_class) item('kiln:choice:' + m.game + ':' + mkey(x.path), (x.choice && x.choice.variant) || x.preferred);
      });
      return { m: m, ds: ds };
  }
  function preheat(url, opts) {
    opts = opts || {};
    return manifestOf(url, opts).then(function (r) {
      var m = r.m, ds = r.ds;
      var all = Promise.all(ds.map(function (d) {
        var rec = load(d, null, 'preheat');
        // A copy found in Cache Storage may be gone from the HTTP cache the game page reads.
        rec.p.then(function (x) { remember(d, 'preheat'); if (x.outcome === 'hit') warmUrl(d.url); }, noop);
        var t0 = now(), line = function (outcome, reason) {
          return { name: d.name, version: d.version, outcome: outcome, reason: reason, ms: r1(now() - t0) };
        };
        return rec.p.then(function (r) { return line(r.outcome, r.reason); }, function (e) { return line('error', why(e)); });
      }));
      // The game's page loads its own files through the HTTP cache: once the engines are in,
      // warm what the page asks for first (its modules, its models in this device's variant).
      // Resolves when they are in too, so a host may open the game right then.
      return all.then(function (engines) {
        return warm(m).then(function (n) {
          return { game: m.game, sequence: m.sequence, device_class: m.device_class || null, engines: engines, warmed: n };
        });
      });
    }, function (e) {
      emit({ type: 'manifest', game: opts.game || gameOf(url) || S.game, outcome: 'rejected', reason: why(e) });
      throw e;
    });
  }
  // Engines preheated here but never asked for: report what preheating found when the page goes.
  function reportPreheated() {
    for (var k in loads) {
      var rec = loads[k];
      if (rec.by === 'preheat' && rec.done && !reported[k]) {
        engineEvent(rec.d, rec.r ? rec.r.outcome : 'error', rec.r ? rec.r.reason : why(rec.e), rec.t1 - rec.t0, false);
      }
    }
    flush(true);
  }

  // ---- models: the variant chosen for this device, else the one that needs no decoder ----
  function mkey(p) { return String(p).replace(/^\.?\//, ''); }
  function variant(m, name) {
    for (var i = 0; i < m.variants.length; i++) if (m.variants[i] && m.variants[i].variant === name) return m.variants[i];
    return null;
  }
  function decoderKind(v, o) {
    if (!v.needs_decoder) return 'none';
    if (o.decoderKind) return o.decoderKind;
    if (simd === undefined) {
      var W = G.WebAssembly;
      // () -> v128 { i8x16.splat(i32.const 0) }: validates only where wasm SIMD is supported.
      try { simd = !W ? 'js' : W.validate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 8, 1, 6, 0, 65, 0, 253, 15, 11])) ? 'wasm-simd' : 'wasm'; } catch (e) { simd = 'wasm'; }
    }
    return simd;
  }
  function decoderReady(dec, ms) {
    return new Promise(function (y, n) {
      var t = setTimeout(function () { n(fail('decoder_timeout', 'decoder not ready within ' + ms + ' ms')); }, ms);
      function no(e) { clearTimeout(t); n(fail('decoder_init_failed', 'decoder failed: ' + (e && e.message || e))); }
      try {
        if (dec.supported === false) throw new Error('not supported here');
        Promise.resolve(typeof dec === 'function' ? dec() : dec.ready).then(function () { clearTimeout(t); y(); }, no);
      } catch (e) { no(e); }
    });
  }
  // Whether the game decodes KTX2: options.ktx2 (its KTX2 loader, or a function returning one
  // or a promise of one, so that it is imported only for a model that has a ktx2 variant) or
  // options.gpuFormat.
  function wantsKtx2(o) { return !!o.ktx2 || typeof o.gpuFormat === 'string'; }
  // The GPU format this device's Basis textures are transcoded to, for a model with a ktx2
  // variant: as the game says (options.gpuFormat), else as its KTX2 loader found it (three.js'
  // KTX2Loader after detectSupport(renderer): its workerConfig; it sends UASTC to ASTC first,
  // then BC7, then ETC2). null where the game does not decode KTX2 or its loader fails.
  function gpuFormat(m, o) {
    if (typeof o.gpuFormat === 'string') return Promise.resolve(o.gpuFormat);
    if (!o.ktx2 || !variant(m, 'ktx2')) return Promise.resolve(null);
    return Promise.resolve().then(function () { return typeof o.ktx2 === 'function' ? o.ktx2() : o.ktx2; }).then(function (l) {
      var c = l && l.workerConfig;
      return !c ? null : c.astcSupported ? 'astc' : c.bptcSupported ? 'bc7' : c.etc2Supported ? 'etc2' : null;
    }, function () { return null; });
  }
  // The model's ktx2 variant (Basis textures, [images] ktx2) when this load can take it: the
  // device's format `f` is one the variant's textures hold their bounds on.
  function ktx2For(m, f) {
    var v = variant(m, 'ktx2');
    return v && f && Array.isArray(v.gpu_formats) && v.gpu_formats.indexOf(f) >= 0 ? v : null;
  }
  // The variant this load takes: forced, else the ktx2 variant where it suits (above) and the
  // class's choice does not say no (measured slower there: choice.ktx2.take false), else the
  // class's choice (a few loads explore the candidate the class has too few measurements of),
  // else the preferred one. Decided once per model and page, so a host's warming and the load
  // agree.
  function pick(m, o, key, f) {
    if (o.variant) return variant(m, o.variant) || variant(m, m.preferred);
    var k2 = ktx2For(m, f), kc = m.choice && m.choice.ktx2;
    if (k2 && !(kc && kc.take === false)) return (picks[key] = { m: m, v: k2 }).v;
    if (picks[key] && picks[key].m === m) return picks[key].v;
    var c = m.choice, name = (c && c.variant) || m.preferred;
    if (c && c.explore && variant(m, c.explore.variant) && Math.random() * 1000 < c.explore.per_mille) name = c.explore.variant;
    var v = variant(m, name) || variant(m, m.preferred);
    if (v && v.variant === 'ktx2') v = variant(m, m.preferred);
    picks[key] = { m: m, v: v };
    return v;
  }
  // On a rewritten page, a model its code names is known from the page itself: the variant
  // the boot script already fetches, and the others beside it (same build folder). No wait for
  // the manifest, whose choice the boot script takes on the next visit.
  function pageModel(k) {
    var st = G.__kilnBoot, e = st && st.models && st.models[k];
    if (!e || !doc) return null;
    var vs = [];
    ['meshopt', 'quantized', 'original'].forEach(function (n) {
      if (e.variants[n]) vs.push({ variant: n, url: abs(e.variants[n]), needs_decoder: n === 'meshopt' });
    });
    return { game: st.cfg.game, m: { path: k, preferred: e.variant, fallback: 'quantized', variants: vs, choice: { variant: e.variant } } };
  }
  function model(path, o) {
    o = o || {};
    var k = mkey(path), pm = o.game ? null : pageModel(k);
    var listed = function () { return settled(function () { return models[(o.game || S.game || '') + ' ' + k] || (!o.game && models[' ' + k]); }); };
    // A load that can take a ktx2 variant asks the manifest whether the model has one for this
    // device (the page's own list is written before the images stage makes it); where it has
    // none, the page's list (and the variant the boot script is already fetching) serves.
    var found = !pm ? listed() : !wantsKtx2(o) ? Promise.resolve(pm) : listed().then(function (e) { return e && variant(e.m, 'ktx2') ? e : pm; });
    return found.then(function (e) {
      if (!e) throw fail('error', 'unknown model ' + path);
      return gpuFormat(e.m, o).then(function (f) { return [e, f]; });
    }).then(function (ef) {
      var e = ef[0], m = e.m, first = pick(m, o, (e.game || '') + ' ' + k, ef[1]);
      if (!first) throw fail('error', 'no variant of ' + path);
      function report(r) {
        if (r.ms != null || r.fallback) {
          emit({ type: 'decode', game: e.game, asset: m.path, variant: r.variant, decoder: r.decoder, bytes: r.bytes, ms: r.ms,
            fallback: r.fallback, reason: r.reason, device: device() });
        }
        return r;
      }
      function attempt(v, reason) {
        var r = { path: m.path, variant: v.variant, url: v.url, bytes: null, ms: null, fetch_ms: null, decoder: decoderKind(v, o),
          fallback: !!reason, reason: reason, result: null };
        var dec = o.decoder, t0;
        return (!v.needs_decoder ? Promise.resolve()
          : dec ? decoderReady(dec, o.decoderTimeoutMs || S.decoderTimeoutMs)
          : Promise.reject(fail('no_decoder', 'no decoder for ' + v.variant))
        ).then(function () {
          t0 = now();
          return fetchBytes(v.url);
        }).then(function (f) {
          r.fetch_ms = r1(now() - t0); r.bytes = f.bytes.byteLength; r.result = f.bytes.buffer;
          if (!o.parse) return r;
          var t1 = now();
          return Promise.resolve().then(function () {
            return o.parse(f.bytes.buffer, { variant: v.variant, url: v.url, path: m.path });
          }).then(function (x) { r.ms = r1(now() - t1); r.result = x; return r; }, function (x) {
            var err = fail('decode_failed', v.variant + ' of ' + m.path + ': ' + (x && x.message || x));
            err.r = r;
            throw err;
          });
        });
      }
      // A variant that cannot be decoded here (its decoder missing or failing, or an image
      // format the device lacks: the variants' textures may be WebP) falls back to the
      // fallback variant if it needs no decoder, then to the original as uploaded.
      function next(tried, x) {
        if (!/^(decoder_init_failed|decoder_timeout|no_decoder|decode_failed)$/.test(x.reason)) throw x;
        var b = [variant(m, m.fallback), variant(m, 'original')].filter(function (c) {
          return c && !c.needs_decoder && tried.indexOf(c) < 0;
        })[0];
        if (!b) throw x;
        tried.push(b);
        return attempt(b, x.reason).then(report, function (y) {
          if (y.r && y.r.bytes != null) report(y.r); // the fallback happened; its decode was not measured
          return next(tried, y);
        });
      }
      return attempt(first, null).then(report, function (x) { return next([first], x); });
    });
  }

  // ---- warming (a host's pre-warm) ----
  function warmUrl(url) {
    if (typeof G.fetch !== 'function' || warmed[url]) return warmed[url];
    return (warmed[url] = G.fetch(url, { credentials: 'same-origin', priority: 'low' }).then(function (r) { return r.arrayBuffer(); }).catch(noop));
  }
  function warm(m) {
    var ps = [];
    (Array.isArray(m.warm) ? m.warm : []).forEach(function (u) { if (typeof u === 'string') ps.push(warmUrl(u)); });
    // A model the page loads through kiln.model, in the variant it will take, at the URL the
    // page fetches it from (its <base> folder: manifest page_base), not at its /cdn/files URL.
    // (pick without a GPU format never gives the ktx2 variant, which the page reads from the
    // manifest.)
    (Array.isArray(m.warm_models) ? m.warm_models : []).forEach(function (p) {
      var e = models[m.game + ' ' + mkey(p)], v = e && pick(e.m, {}, m.game + ' ' + mkey(p));
      if (v) ps.push(warmUrl(typeof m.page_base === 'string' && v.path ? m.page_base + v.path : v.url));
    });
    return Promise.all(ps).then(function () { return ps.length; });
  }

  // ---- page mode: a page rewritten by Kiln (kiln-boot.js) lets the browser load its engines,
  // verified by integrity; the loader reports what happened and serves kiln.model ----
  function perfEntry(url) {
    try {
      var list = G.performance && G.performance.getEntriesByName ? G.performance.getEntriesByName(url, 'resource') : [];
      return list.length ? list[list.length - 1] : null;
    } catch (e) { return null; }
  }
  function settle(st, d) {
    var final = /^(library|fallback|own|failed)$/;
    return new Promise(function (y) {
      function check() {
        var x = st.state(d.sha256);
        if (x && final.test(x.state)) { y(x); return true; }
        return false;
      }
      if (!check()) st.watch(check);
    });
  }
  function pageOutcome(d, x) {
    if (x.state === 'library') {
      var ent = perfEntry(d.url), idx = (stored(INDEX) || {})[d.sha256];
      // Resource Timing tells a cache hit (nothing transferred) from a download; without it
      // (no Timing-Allow-Origin) this device's index is the best guess.
      var timed = ent && (ent.decodedBodySize > 0 || ent.transferSize > 0);
      var hit = timed ? ent.transferSize === 0 || ent.deliveryType === 'cache' : !!idx;
      var ms = ent ? ent.responseEnd - ent.startTime : x.at;
      var r = hit ? { outcome: 'hit', reason: null, ms: ms, prewarmed: !!(idx && idx.by === 'preheat') || lobbyClaim, shared: sharedHit(d, d.game) }
        : { outcome: 'miss', reason: classify(d), ms: ms };
      remember(d, 'page');
      return Promise.resolve(r);
    }
    if (x.state === 'own') return Promise.resolve({ outcome: 'fallback', reason: 'unsupported', ms: x.at });
    if (x.state === 'failed') return Promise.resolve({ outcome: 'error', reason: 'error', ms: x.at });
    // The build's own copy ran: tell a library copy that does not match from one that did not come.
    if (!subtle()) return Promise.resolve({ outcome: 'fallback', reason: 'error', ms: x.at });
    return fetchVerified(d.url, d).then(function () { return 'error'; }, function (e) { return why(e); }).then(function (reason) {
      return { outcome: 'fallback', reason: reason, ms: x.at };
    });
  }
  function pageEngine(d, x) {
    if (!d.module) return global(d);
    return dynImport(x.state === 'library' ? d.url : abs(d.path));
  }
  function attach(st) {
    var cfg = st.cfg || {};
    booted = true;
    configure(cfg);
    var ds = [], game = cfg.game || S.game;
    (cfg.engines || []).forEach(function (e) {
      var d = norm(e, game, true);
      if (d) { ds.push(d); bootDesc[d.name] = d; }
    });
    if (cfg.manifest) {
      // A repeat visit of the same build needs no network for the model choice: the manifest
      // verified last time is checked again and used at once; the fresh one follows.
      var k = cfg.build ? kept(game, cfg.build, { game: game }, cfg.manifest) : null, quick = null;
      if (k) {
        pending.push(k);
        quick = k.then(learnManifest, noop).then(function () { pending.splice(pending.indexOf(k), 1); });
      }
      manifestOf(cfg.manifest, { game: game, keep: true }, quick).then(noop, function (e) {
        emit({ type: 'manifest', game: game, outcome: 'rejected', reason: why(e) });
      });
    }
    var runs = ds.map(function (d) {
      var got = settle(st, d);
      demands[d.name] = got.then(function (x) {
        if (x.state === 'failed') throw fail('error', d.name + ': neither the library copy nor the build\'s own loaded');
        return pageEngine(d, x);
      });
      demands[d.name].catch(noop);
      return got.then(function (x) { return pageOutcome(d, x); }).then(function (r) {
        engineEvent(d, r.outcome, r.reason, r.ms, r.prewarmed, r.shared);
      });
    });
    Promise.all(runs).then(domReady).then(function () {
      var summary = { game: game, ms: r1(now()), engines: [] };
      events.forEach(function (e) {
        if (e.type === 'preheat' && bootDesc[e.engine]) summary.engines.push({ name: e.engine, version: e.version, outcome: e.outcome, reason: e.reason, ms: e.ms });
      });
      readyDone(summary);
      if (st.readyDone) st.readyDone(summary);
    });
    // Calls the page made before the loader arrived.
    (st.queue || []).splice(0).forEach(function (c) {
      var f = G.kiln[c[0]];
      Promise.resolve().then(function () { return f.apply(null, c[1]); }).then(c[2], c[3]);
    });
  }

  // ---- boot: engines first, then the page's deferred scripts in order ----
  function domReady() {
    return new Promise(function (y) { if (dclSeen || doc.readyState !== 'loading') y(); else domWaiters.push(y); });
  }
  function hold(e) {
    if (e.type === 'DOMContentLoaded') { dclSeen = true; domWaiters.splice(0).forEach(function (y) { y(); }); }
    // eventPhase 2: the document's own DOMContentLoaded / the window's load, not an element's.
    if (holding && e.eventPhase === 2) { held[e.type] = true; e.stopImmediatePropagation(); }
  }
  function release() {
    holding = false;
    if (held.DOMContentLoaded) doc.dispatchEvent(new Event('DOMContentLoaded', { bubbles: true }));
    if (held.load) G.dispatchEvent(new Event('load'));
  }
  var JS = /^(|module|(text|application)\/(x-)?(java|ecma)script|text\/(jscript|livescript)|(text|application)\/(x-)?javascript1\.[0-5])$/;
  function mapOf(ds) {
    var imports = {}, scopes = {}, lookup = {}, own = [];
    ds.forEach(function (d) {
      var b = blobs[d.sha256];
      if (!b || !d.path) return;
      var u = abs(d.path);
      lookup[u] = imports[u] = b;
      if (/^[^./][^:]*$/.test(d.path)) imports['./' + d.path] = b;
    });
    function swap(m) {
      var out = {};
      for (var k in m) out[k] = lookup[abs(m[k])] || m[k];
      return out;
    }
    // The game's own (deferred) import maps merge into ours: one map works in every browser.
    var games = doc.querySelectorAll('script[type="text/kiln-deferred"][data-kiln-type="importmap"]');
    for (var i = 0; i < games.length; i++) {
      var g;
      try { g = JSON.parse(games[i].text); } catch (e) { continue; }
      own.push(games[i]);
      if (g.imports) imports = assign(swap(g.imports), imports);
      for (var sc in g.scopes || {}) scopes[sc] = swap(g.scopes[sc]);
    }
    own.forEach(function (el) { el.setAttribute('data-kiln-merged', ''); });
    return { imports: imports, scopes: scopes };
  }
  function addMap(map) {
    var s = doc.createElement('script');
    s.type = 'importmap';
    s.text = JSON.stringify(map);
    parent().appendChild(s);
  }
  function replayOne(old) {
    var t = (old.getAttribute('data-kiln-type') || '').trim().toLowerCase();
    if (old.hasAttribute('data-kiln-merged') || !old.parentNode) return null;
    var s = doc.createElement('script'), src = old.getAttribute('src');
    for (var i = 0; i < old.attributes.length; i++) {
      var a = old.attributes[i];
      if (a.name !== 'type' && a.name !== 'data-kiln-type') s.setAttribute(a.name, a.value);
    }
    if (old.nonce) s.nonce = old.nonce;
    if (t) s.setAttribute('type', old.getAttribute('data-kiln-type'));
    var waits = JS.test(t) && !(s.hasAttribute('nomodule') && 'noModule' in s);
    var p = null;
    if (src) {
      if (!s.hasAttribute('async')) s.async = false;
      if (waits) p = new Promise(function (y) { s.addEventListener('load', y); s.addEventListener('error', y); });
    } else if (t === 'module' && waits) {
      // Inline modules fire no load event: the module tells us itself.
      var id = ++markId;
      s.text = old.text + '\n;globalThis.kiln._mark(' + id + ');';
      p = new Promise(function (y) {
        var t1 = setTimeout(y, S.timeoutMs);
        marks[id] = function () { clearTimeout(t1); G.removeEventListener('error', marks[id]); y(); };
        G.addEventListener('error', marks[id]);
      });
    } else s.text = old.text;
    old.parentNode.replaceChild(s, old);
    return p;
  }
  function replay() {
    var list = doc.querySelectorAll('script[type="text/kiln-deferred"]'), i = 0;
    function next() {
      if (i >= list.length) return Promise.resolve();
      return Promise.resolve(replayOne(list[i++])).then(next);
    }
    return next();
  }
  function boot(cfg) {
    if (booted) return ready;
    booted = true;
    cfg = cfg || {};
    configure(cfg);
    var ds = [];
    (cfg.engines || []).forEach(function (e) {
      var d = norm(e, cfg.game || S.game, true);
      if (d) { ds.push(d); bootDesc[d.name] = d; }
    });
    if (doc) holding = true;
    var mods = ds.filter(function (d) { return d.module; }), arrived = {}, mapped = false, mapDone, mapReady;
    mapReady = new Promise(function (y) { mapDone = y; });
    var arrivals = mods.map(function (d) { return new Promise(function (y) { arrived[d.name] = y; }); });
    function hook(d, url) {
      if (mapped && doc && d.path) { var m = { imports: {} }; m.imports[abs(d.path)] = url; addMap(m); }
      if (arrived[d.name]) arrived[d.name]();
      return mapReady;
    }
    if (!mods.length || !doc) mapDone();
    else Promise.all(arrivals).then(domReady).then(function () { addMap(mapOf(mods)); mapped = true; mapDone(); });
    var t0 = now();
    var runs = ds.map(function (d) {
      var p = demands[d.name] || (demands[d.name] = demand(d.name, d.module ? hook : null));
      return p.then(noop, noop).then(function () { if (arrived[d.name]) arrived[d.name](); });
    });
    Promise.all(runs).then(function () {
      return doc ? domReady().then(function () { return mapReady; }).then(replay) : null;
    }).then(function () {
      var summary = { game: cfg.game || S.game, ms: r1(now() - t0), engines: [] };
      events.forEach(function (e) {
        if (e.type === 'preheat' && bootDesc[e.engine]) summary.engines.push({ name: e.engine, version: e.version, outcome: e.outcome, reason: e.reason, ms: e.ms });
      });
      if (doc) release();
      readyDone(summary);
    }).catch(function (e) { if (doc) release(); readyFail(e); });
    return ready;
  }

  function configure(o) {
    o = o || {};
    assign(S, { keys: o.keys, telemetry: o.telemetry, game: o.game, timeoutMs: o.timeoutMs, decoderTimeoutMs: o.decoderTimeoutMs });
    if ('deviceClass' in o) { S.deviceClass = cls(o.deviceClass); dev = null; }
    if ('device' in o) { S.device = o.device || null; dev = null; }
    return S;
  }

  if (doc && doc.addEventListener) doc.addEventListener('DOMContentLoaded', hold, true);
  if (G.addEventListener) {
    G.addEventListener('load', hold, true);
    G.addEventListener('pagehide', reportPreheated);
  }

  G.kiln = {
    version: '1',
    configure: configure,
    preheat: preheat,
    prewarmedUrl: prewarmedUrl,
    engine: engine,
    model: model,
    boot: boot,
    ready: ready,
    events: events,
    device: device,
    _mark: function (id) { if (marks[id]) marks[id](); }
  };
  if (doc && G.__kilnBoot && G.__kilnBoot.cfg) attach(G.__kilnBoot);
})(typeof globalThis !== 'undefined' ? globalThis : typeof self !== 'undefined' ? self : typeof window !== 'undefined' ? window : null);
