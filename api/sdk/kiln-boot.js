/* Kiln page boot: inlined by Kiln's page rewrite at the top of <head>; the rewrite replaces
 * KILN_CONFIG with the page's boot config. Plain ES5, runs before anything else on the page.
 * It lets the browser fetch everything at once, and keeps engine code verified:
 *  - a module engine: writes the page's import map with the engine's specifiers pointed at
 *    the shared library copy, with import-map `integrity`; the rewrite's
 *    <link rel=modulepreload integrity> fetches and verifies it in parallel with the game's
 *    own modules. If the library copy fails (network or hash), the page reloads once with the
 *    map pointed at the build's own copy (a failed module stays failed in its document).
 *  - a classic engine: the rewrite replaces its <script> with the library copy under SRI and
 *    calls kiln_boot.classic(sha) right after it, which writes the build's own copy in place
 *    if the library copy failed (classic order is kept).
 * It records what happened to each engine for the loader (kiln-loader.js, loaded async), and
 * queues kiln.* calls made before the loader arrives. Docs: api/sdk/README.md, docs/load-time.md. */
(function (G, c) {
  'use strict';
  var d = document, perf = G.performance, FB = 'kiln:fb:';
  var st = G.__kilnBoot = { cfg: c, states: {}, waiters: [], reloaded: false };
  st.ready = new Promise(function (y) { st.readyDone = y; });
  function now() { return perf && perf.now ? perf.now() : 0; }
  function ss(k, v) {
    try {
      if (v === undefined) return G.sessionStorage.getItem(k);
      if (v === null) G.sessionStorage.removeItem(k); else G.sessionStorage.setItem(k, v);
    } catch (e) { /* blocked */ }
    return null;
  }
  function engine(sha) {
    for (var i = 0; i < c.engines.length; i++) if (c.engines[i].sha256 === sha) return c.engines[i];
    return null;
  }
  function note(sha, state) {
    st.states[sha] = { state: state, at: now() };
    var w = st.waiters.slice();
    for (var i = 0; i < w.length; i++) w[i]();
  }
  st.state = function (sha) { return st.states[sha] || null; };
  st.watch = function (fn) { st.waiters.push(fn); };
  function sri(e) { return e.integrity; }
  function esc(s) { return String(s).replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;'); }
  var preload = false;
  try { var l = d.createElement('link'); preload = !!(l.relList && l.relList.supports && l.relList.supports('modulepreload')); } catch (e) { /* old */ }
  st.preload = preload;

  function on(ev) {
    var t = ev.target, sha = t && t.getAttribute && t.getAttribute('data-kiln-engine');
    var e = sha && engine(sha);
    if (!e) return;
    var own = t.hasAttribute('data-kiln-own');
    // Once the page uses the build's own copy, only that copy's events count.
    if (!own && e.mode && e.mode !== 'library') return;
    if (ev.type === 'load') { note(sha, own ? 'fallback' : 'library'); return; }
    note(sha, own ? 'failed' : 'library_failed');
    if (own || !e.module) return;
    if (!ss(FB + sha)) {
      // The game's module graph fails with the library copy: load the page again with the
      // build's own copy (once per tab session; the loader reports why).
      ss(FB + sha, String(Date.now()));
      st.reloaded = true;
      G.location.reload();
    }
  }
  // An element's load event stops at the document (it never reaches the window).
  d.addEventListener('load', on, true);
  d.addEventListener('error', on, true);

  // Module engines: the import map (the page's own, merged by the rewrite) and the mode.
  if (c.map) {
    var map = JSON.parse(JSON.stringify(c.map)), cur = d.currentScript;
    for (var i = 0; i < c.engines.length; i++) {
      var e = c.engines[i];
      if (!e.module) continue;
      var fb = ss(FB + e.sha256);
      e.mode = !preload ? 'own' : fb ? 'fallback' : 'library';
      if (e.mode === 'library') continue;
      // Every specifier that named the library copy now names the build's own copy.
      var own = new URL(e.path, d.baseURI).href;
      var swap = function (m) { for (var k in m) if (m[k] === e.url) m[k] = own; };
      swap(map.imports || {});
      for (var sc in map.scopes || {}) swap(map.scopes[sc]);
      if (map.integrity) { delete map.integrity[e.url]; map.integrity[own] = sri(e); }
      if (e.mode === 'own') note(e.sha256, 'own');
    }
    var s = d.createElement('script');
    s.type = 'importmap';
    s.textContent = JSON.stringify(map);
    if (cur && cur.parentNode) cur.parentNode.insertBefore(s, cur.nextSibling); else (d.head || d.documentElement).appendChild(s);
    for (i = 0; i < c.engines.length; i++) {
      e = c.engines[i];
      if (e.module && e.mode === 'fallback') {
        // Fetched and verified like the library copy was; its load event marks the fallback.
        var k = d.createElement('link');
        k.rel = 'modulepreload'; k.href = e.path; k.integrity = sri(e);
        k.setAttribute('data-kiln-engine', e.sha256); k.setAttribute('data-kiln-own', '');
        s.parentNode.insertBefore(k, s.nextSibling);
      }
    }
  }

  // A classic engine's library copy just ran or failed: on failure, the build's own copy
  // (same hash) goes in its place before any later script runs.
  st.classic = function (sha) {
    var e = engine(sha), s0 = st.states[sha];
    if (!e || (s0 && s0.state === 'library')) return;
    note(sha, 'library_failed');
    e.mode = 'fallback';
    d.write('<script src="' + esc(e.path) + '" integrity="' + esc(sri(e)) + '" crossorigin="anonymous" data-kiln-engine="' +
      esc(sha) + '" data-kiln-own></scr' + 'ipt>');
  };

  // A page that loads its models through kiln.model: the variant this device takes (the one
  // Kiln chose for it last time, else meshopt where WebAssembly runs) is fetched from the start,
  // beside the engine, not after the game's code and the manifest.
  st.models = {};
  if (c.kiln_model) {
    for (var j = 0; j < (c.models || []).length; j++) {
      var m = c.models[j], v = null;
      try { v = G.localStorage.getItem('kiln:choice:' + c.game + ':' + m.path); } catch (x) { /* blocked */ }
      if (!m.variants || !m.variants[v]) v = G.WebAssembly ? 'meshopt' : 'quantized';
      var href = m.variants[v];
      if (!href) continue;
      var p = d.createElement('link');
      p.rel = 'preload'; p.as = 'fetch'; p.crossOrigin = 'anonymous'; p.href = href;
      (d.head || d.documentElement).appendChild(p);
      st.models[m.path] = { variant: v, variants: m.variants };
    }
  }

  // Calls made before the loader arrives wait for it.
  if (!G.kiln) {
    var q = st.queue = [];
    var later = function (name) {
      return function () {
        var a = arguments;
        return new Promise(function (y, n) { q.push([name, a, y, n]); });
      };
    };
    G.kiln = { model: later('model'), engine: later('engine'), preheat: later('preheat'), ready: st.ready, events: [] };
  }
})(window, KILN_CONFIG);
