// Kiln dashboard, served at /dashboard: reads GET /v1/dashboard/data with its login session
// and renders four views (pre-warm, decode, library, pipeline). No dependencies besides charts.js.
//
// Login: a token from the URL fragment (#token=...&game=...&range=...) or the form is traded
// once for a session (POST /dashboard/session sets an HttpOnly cookie) and then forgotten:
// the page keeps no token anywhere a script could read it (no localStorage), and removes it
// from the visible URL at once. "Change token" logs out (DELETE /dashboard/session).
// Test hooks: body[data-state] is "loading", "ready", "error" or "token" (waiting for one);
// #dashboard-error holds the error text; every chart is .chart[data-chart], every table
// table[data-table], every view [data-view].
(() => {
  'use strict';
  const C = window.KilnCharts;
  const DATA_URL = '/v1/dashboard/data';
  const SESSION_URL = '/dashboard/session';
  const RANGES = { '1h': 1, '6h': 6, '24h': 24, '7d': 168, '30d': 720 };
  const DEFAULT_RANGE = '24h';
  const HOUR = 3600e3;
  const DASH = '–';
  const NO_DATA = 'No data in this range';

  const CLASS_ORDER = ['ios-high', 'ios-low', 'android-high', 'android-mid', 'android-low', 'desktop', 'unknown'];
  const CLASS_COLORS = {
    'ios-high': '#1f77b4', 'ios-low': '#17becf', 'android-high': '#2ca02c', 'android-mid': '#a5a51c',
    'android-low': '#ff7f0e', desktop: '#9467bd', unknown: '#8c8c8c', all: '#222831',
  };
  const VARIANT_ORDER = ['original', 'meshopt', 'quantized', 'vat'];
  const VARIANT_COLORS = { original: '#9aa5b1', meshopt: '#4e79a7', quantized: '#f28e2b', vat: '#76b7b2' };
  const VARIANT_DASH = { original: '1 4', meshopt: null, quantized: '8 4', vat: '3 3' };
  const STATUS_COLORS = { queued: '#9aa5b1', processing: '#4e79a7', published: '#2ca02c', failed: '#d62728' };
  const EXTRA_COLORS = ['#e15759', '#b07aa1', '#9c755f', '#edc948', '#ff9da7', '#59a14f'];
  const EXTRA_DASH = ['2 3', '8 3 2 3', '5 2'];

  const state = { login: null, game: '', range: DEFAULT_RANGE, seq: 0, abort: null, data: null, window: null, decodeVariant: null };

  // ---- small helpers ------------------------------------------------------------------
  const $ = (sel) => document.querySelector(sel);
  const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
  const num = (v) => (isNum(v) ? v : 0);
  const hash = (s) => [...String(s)].reduce((a, c) => (a * 31 + c.charCodeAt(0)) >>> 0, 7);
  const pick = (map, list, key) => (key in map ? map[key] : list[hash(key) % list.length]);
  const classColor = (c) => pick(CLASS_COLORS, EXTRA_COLORS, c);
  const variantColor = (v) => pick(VARIANT_COLORS, EXTRA_COLORS, v);
  const variantDash = (v) => pick(VARIANT_DASH, EXTRA_DASH, v);
  const floorHour = (t) => Math.floor(t / HOUR) * HOUR;
  const rfc3339 = (d) => d.toISOString().replace(/\.\d{3}Z$/, 'Z');
  const rank = (v, order) => (order.includes(v) ? order.indexOf(v) : order.length);
  const ordered = (keys, order) => [...new Set(keys)].sort((a, b) => rank(a, order) - rank(b, order) || String(a).localeCompare(String(b)));
  const byClassVariant = (a, b) => {
    const [ca, cb, va, vb] = [a.device_class || 'unknown', b.device_class || 'unknown', a.variant || '?', b.variant || '?'].map(String);
    return rank(ca, CLASS_ORDER) - rank(cb, CLASS_ORDER) || ca.localeCompare(cb) || rank(va, VARIANT_ORDER) - rank(vb, VARIANT_ORDER) || va.localeCompare(vb);
  };
  function groupBy(rows, key) {
    const m = new Map();
    for (const r of rows) {
      const k = key(r);
      if (!m.has(k)) m.set(k, []);
      m.get(k).push(r);
    }
    return m;
  }

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === 'text') el.textContent = v;
      else if (k === 'class') el.className = v;
      else el.setAttribute(k, v);
    }
    for (const c of children.flat()) if (c != null && c !== false) el.append(c instanceof Node ? c : String(c));
    return el;
  }
  function swatch(color, text) {
    const dot = h('i', { class: 'dot' });
    dot.style.background = color;
    return h('span', { class: 'keyed' }, dot, text);
  }

  const NF = new Intl.NumberFormat('en-US');
  const fmt = {
    text: (v) => (v == null || v === '' ? DASH : String(v)),
    int: (v) => (isNum(v) ? NF.format(Math.round(v)) : DASH),
    pct: (v) => (isNum(v) ? `${(v * 100).toFixed(1)} %` : DASH),
    ms: (v) => (isNum(v) ? (v >= 1000 ? NF.format(Math.round(v)) : v.toFixed(1)) : DASH),
    secs: (v) => (isNum(v) ? (v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : NF.format(Math.round(v))) : DASH),
    roi: (v) => (isNum(v) ? `${v >= 100 ? NF.format(Math.round(v)) : v.toFixed(v < 1 && v !== 0 ? 2 : 1)}×` : DASH),
    bytes(v) {
      if (!isNum(v)) return DASH;
      const units = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];
      let x = Math.abs(v);
      let i = 0;
      while (x >= 1000 && i < units.length - 1) { x /= 1000; i++; }
      return i ? `${v < 0 ? '-' : ''}${x.toFixed(1)} ${units[i]}` : `${Math.round(v)} B`;
    },
    age(v) {
      if (!isNum(v)) return DASH;
      const s = Math.max(0, Math.round(v));
      if (s < 60) return `${s} s`;
      if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
      if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
      return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
    },
    time(v) {
      const t = Date.parse(v);
      return Number.isNaN(t) ? DASH : C.timeText(t);
    },
  };
  const ratio = (a, b) => (isNum(a) && isNum(b) && b > 0 ? a / b : null);

  // ---- token, filters, URL fragment ----------------------------------------------------
  // Trades a token for a session cookie; the token is not kept. Resolves to an error text
  // or null.
  async function login(token) {
    try {
      const res = await fetch(SESSION_URL, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify({ token }),
        credentials: 'same-origin',
        cache: 'no-store',
      });
      if (res.ok) return null;
      let detail = '';
      try { const b = await res.json(); detail = b.message || b.error || ''; } catch { /* no body */ }
      return `Token refused (${res.status})${detail ? `: ${detail}` : ''}`;
    } catch (e) {
      return `Network error: could not reach Kiln at ${location.origin} (${e && e.message ? e.message : e}).`;
    }
  }
  async function logout() {
    try { await fetch(SESSION_URL, { method: 'DELETE', credentials: 'same-origin', cache: 'no-store' }); } catch { /* gone anyway */ }
  }

  function applyFragment() {
    const p = new URLSearchParams(location.hash.replace(/^#/, ''));
    const token = (p.get('token') || '').trim();
    if (token) state.login = login(token);
    state.game = p.get('game') || '';
    state.range = RANGES[p.get('range')] ? p.get('range') : DEFAULT_RANGE;
  }
  // Shows the filters in the URL (shareable), never the token.
  function writeFragment() {
    const p = new URLSearchParams();
    if (state.game) p.set('game', state.game);
    p.set('range', state.range);
    history.replaceState(history.state, '', `${location.pathname}${location.search}#${p}`);
  }
  function syncControls() {
    syncGames(state.data ? state.data.games : []);
    $('#filter-range').value = state.range;
  }
  function syncGames(games) {
    const sel = $('#filter-game');
    const list = [...new Set(games)];
    if (state.game && !list.includes(state.game)) list.push(state.game);
    const have = [...sel.options].slice(1).map((o) => o.value);
    if (have.join('\n') !== list.join('\n')) {
      sel.replaceChildren(h('option', { value: '', text: 'All games' }), ...list.map((g) => h('option', { value: g, text: g })));
    }
    sel.value = state.game;
  }

  function setState(s) { document.body.dataset.state = s; }
  function fail(message) {
    const el = $('#dashboard-error');
    const stale = state.data && !document.body.classList.contains('needs-token');
    el.textContent = stale ? `${message.replace(/\.?$/, '.')} The views below still show the previous answer.` : message;
    el.hidden = false;
    setState('error');
  }
  function clearError() {
    const el = $('#dashboard-error');
    el.textContent = '';
    el.hidden = true;
  }
  function askToken() {
    $('#token-panel').hidden = false;
    document.body.classList.add('needs-token');
    if (document.body.dataset.state !== 'error') setState('token');
    $('#token-input').value = '';
    $('#token-input').focus();
  }

  // ---- fetch ----------------------------------------------------------------------------
  async function load() {
    const seq = ++state.seq;
    if (state.login) {
      const pending = state.login;
      const refused = await pending;
      if (state.login === pending) state.login = null;
      if (seq !== state.seq) return undefined;
      if (refused) {
        askToken();
        return fail(refused);
      }
    }
    if (state.abort) state.abort.abort();
    const ctrl = new AbortController();
    state.abort = ctrl;
    const to = new Date(Math.floor(Date.now() / 1000) * 1000);
    const from = new Date(to.getTime() - RANGES[state.range] * HOUR);
    state.window = { from: from.getTime(), to: to.getTime() };
    const query = new URLSearchParams({ game: state.game, from: rfc3339(from), to: rfc3339(to) });
    setState('loading');
    let res;
    let text;
    try {
      res = await fetch(`${DATA_URL}?${query}`, {
        headers: { Accept: 'application/json' },
        credentials: 'same-origin',
        cache: 'no-store',
        signal: ctrl.signal,
      });
      text = await res.text();
    } catch (e) {
      if (seq !== state.seq) return undefined;
      return fail(`Network error: could not reach Kiln at ${location.origin} (${e && e.message ? e.message : e}).`);
    }
    if (seq !== state.seq) return undefined; // a newer request is on its way
    let body = null;
    try { body = JSON.parse(text); } catch { /* handled below */ }
    if (!res.ok) {
      const detail = (body && (body.message || body.error)) || text.trim().slice(0, 300) || res.statusText || 'no details';
      if (res.status === 401) {
        askToken();
        // Not logged in (yet, or the session expired): the form asks, no error to show.
        if (!state.data && !document.getElementById('dashboard-error').textContent) return undefined;
        return fail(`Token refused (401): ${detail}`);
      }
      if (res.status === 403) return fail(`Not allowed (403): ${detail}`);
      if (res.status === 400) return fail(`Bad request (400): ${detail}`);
      return fail(`Kiln answered ${res.status}${res.statusText ? ` ${res.statusText}` : ''}: ${detail}`);
    }
    if (!body || typeof body !== 'object' || Array.isArray(body)) return fail('Kiln sent a response that is not a JSON object.');
    $('#token-panel').hidden = true;
    document.body.classList.remove('needs-token');
    try {
      render(body);
    } catch (e) {
      return fail(`Could not show the data: ${e && e.message ? e.message : e}`);
    }
    clearError();
    setState('ready');
    return undefined;
  }

  // ---- rendering ------------------------------------------------------------------------
  const rows = (v) => (Array.isArray(v) ? v.filter((r) => r && typeof r === 'object') : []);
  const obj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
  function normalize(r) {
    const p = obj(r.prewarm);
    const d = obj(r.decode);
    const l = obj(r.library);
    const pl = obj(r.pipeline);
    return {
      games: (Array.isArray(r.games) ? r.games : []).filter((g) => typeof g === 'string'),
      from: r.from, to: r.to,
      prewarm: { totals: obj(p.totals), hourly: rows(p.hourly), misses_by_reason: rows(p.misses_by_reason), rows: rows(p.rows) },
      decode: { rows: rows(d.rows), hourly: rows(d.hourly), choices: rows(d.choices) },
      library: { totals: obj(l.totals), entries: rows(l.entries) },
      pipeline: {
        queue: obj(pl.queue), builds_by_status: obj(pl.builds_by_status), hourly: rows(pl.hourly),
        stages: rows(pl.stages), recent_failures: rows(pl.recent_failures), images: obj(pl.images),
      },
    };
  }

  function render(raw) {
    const d = normalize(raw);
    state.data = d;
    syncControls();
    let from = Date.parse(d.from);
    let to = Date.parse(d.to);
    if (Number.isNaN(from) || Number.isNaN(to)) ({ from, to } = state.window || { from: Date.now() - HOUR, to: Date.now() });
    $('#window-text').textContent = `${C.timeText(from).replace(' UTC', '')} → ${C.timeText(to)}`;
    // Hourly rows, drawn per hour up to 2 days, per 6 hours up to 8 days, per day beyond.
    const span = to - from;
    const bucket = span > 8 * 24 * HOUR ? 24 * HOUR : span > 2 * 24 * HOUR ? 6 * HOUR : HOUR;
    const win = { from, x0: Math.floor(from / bucket) * bucket, x1: to, bucket, per: { [HOUR]: 'hour', [6 * HOUR]: '6 hours', [24 * HOUR]: 'day' }[bucket] };
    renderPrewarm(d.prewarm, win);
    renderDecode(d.decode, win);
    renderLibrary(d.library);
    renderPipeline(d.pipeline, win);
  }

  function tiles(name, list) {
    $(`[data-tiles="${name}"]`).replaceChildren(...list.map((t) => h('div', { class: `tile${t.big ? ' big' : ''}${t.tone ? ` ${t.tone}` : ''}` },
      h('div', { class: 'tile-label', text: t.label }),
      h('div', { class: 'tile-value', id: t.id, text: t.value }),
      t.sub ? h('div', { class: 'tile-sub', text: t.sub }) : null)));
  }

  function chart(name) { return $(`.chart[data-chart="${name}"]`); }
  function caption(name, text) {
    const cap = chart(name).closest('figure').querySelector('figcaption .cap');
    if (cap) cap.textContent = text;
  }
  const lineWin = (win) => ({ x0: win.x0, x1: win.x1, gapMs: 1.5 * win.bucket });

  // A sortable table: click a heading to sort by it (again to reverse); nulls sort last.
  function table(name, columns, list, opts = {}) {
    const t = $(`table[data-table="${name}"]`);
    if (!t.kilnSort) t.kilnSort = { key: opts.sortKey || null, dir: opts.sortDir || -1 };
    const sort = t.kilnSort;
    const value = (c, r) => (c.sortBy ? c.sortBy(r) : c.get ? c.get(r) : r[c.key]);
    const draw = () => {
      const head = h('tr', null, columns.map((c) => {
        const th = h('th', { scope: 'col', class: c.num ? 'num' : null, title: c.help || `Sort by ${c.label}` }, c.label);
        if (sort.key === c.key) {
          th.classList.add('sorted', sort.dir > 0 ? 'asc' : 'desc');
          th.setAttribute('aria-sort', sort.dir > 0 ? 'ascending' : 'descending');
        }
        th.addEventListener('click', () => {
          if (sort.key === c.key) sort.dir = -sort.dir;
          else Object.assign(sort, { key: c.key, dir: c.num ? -1 : 1 });
          draw();
        });
        return th;
      }));
      const items = list.slice();
      const col = columns.find((c) => c.key === sort.key);
      if (col) {
        items.sort((a, b) => {
          const x = value(col, a);
          const y = value(col, b);
          if (x == null || y == null) return (x == null) - (y == null);
          return sort.dir * (isNum(x) && isNum(y) ? x - y : String(x).localeCompare(String(y), 'en', { numeric: true }));
        });
      }
      const body = items.length
        ? items.map((r) => h('tr', { class: opts.rowClass ? opts.rowClass(r) : null }, columns.map((c) => {
          const v = c.get ? c.get(r) : r[c.key];
          const out = c.fmt ? c.fmt(v, r) : fmt.text(v);
          const cls = [c.num ? 'num' : '', c.cls ? c.cls(r) : ''].filter(Boolean).join(' ');
          return h('td', { class: cls || null, title: c.title ? c.title(r) : null }, out);
        })))
        : [h('tr', { class: 'empty-row' }, h('td', { colspan: columns.length, text: opts.empty || NO_DATA }))];
      t.replaceChildren(h('thead', null, head), h('tbody', null, body));
    };
    draw();
  }
  const classCol = { key: 'device_class', label: 'Device class', fmt: (v) => (v ? swatch(classColor(v), v) : DASH), sortBy: (r) => rank(r.device_class, CLASS_ORDER) };
  const variantCol = { key: 'variant', label: 'Variant', fmt: (v) => (v ? swatch(variantColor(v), v) : DASH) };
  const pctAxis = (v) => `${Math.round(v * 100)} %`;

  function renderPrewarm(p, win) {
    const t = p.totals;
    tiles('prewarm', [
      { id: 'prewarm-hit-rate', label: 'Hit rate', value: fmt.pct(t.hit_rate), big: true, sub: num(t.events) > 0 ? `${fmt.int(t.hits)} hits in ${fmt.int(t.events)} pre-warm events` : 'no pre-warm events in this range' },
      { id: 'prewarm-events', label: 'Events', value: fmt.int(t.events) },
      { id: 'prewarm-hits', label: 'Hits', value: fmt.int(t.hits) },
      { id: 'prewarm-misses', label: 'Misses', value: fmt.int(t.misses) },
      { id: 'prewarm-fallbacks', label: 'Fallbacks', value: fmt.int(t.fallbacks) },
      { id: 'prewarm-errors', label: 'Errors', value: fmt.int(t.errors), tone: num(t.errors) > 0 ? 'warn' : null },
    ]);

    // Per class and bucket: the server's rate for a single hour, hits ÷ events for longer buckets.
    const cells = new Map(); // class -> Map(x -> {events, hits, n, rate})
    const add = (cls, x, r) => {
      if (!cells.has(cls)) cells.set(cls, new Map());
      const m = cells.get(cls);
      const c = m.get(x) || { events: 0, hits: 0, n: 0, rate: undefined };
      c.events += num(r.events);
      c.hits += num(r.hits);
      c.n += 1;
      c.rate = r.hit_rate;
      m.set(x, c);
    };
    for (const r of p.hourly) {
      const t = Date.parse(r.hour);
      if (Number.isNaN(t)) continue;
      const x = Math.floor(t / win.bucket) * win.bucket;
      add(String(r.device_class || 'unknown'), x, r);
      add('all', x, { events: r.events, hits: r.hits });
    }
    const series = [...ordered([...cells.keys()].filter((c) => c !== 'all'), CLASS_ORDER), ...(cells.size ? ['all'] : [])].map((cls) => ({
      name: cls,
      color: classColor(cls),
      width: cls === 'all' ? 3 : 2,
      points: [...cells.get(cls)].map(([x, c]) => {
        const rate = c.n === 1 && win.bucket === HOUR && c.rate !== undefined ? c.rate : ratio(c.hits, c.events);
        return { x, y: rate, title: `${fmt.pct(rate)} (${fmt.int(c.hits)} hits of ${fmt.int(c.events)})` };
      }),
    }));
    caption('prewarm-hit-rate-hourly', `Hit rate per ${win.per}, by device class`);
    C.line(chart('prewarm-hit-rate-hourly'), { ...lineWin(win), series, yMax: 1, yFormat: fmt.pct, yTickFormat: pctAxis, yLabel: 'hit rate' });

    const reasons = p.misses_by_reason.slice().sort((a, b) => num(b.count) - num(a.count));
    C.bars(chart('prewarm-misses-by-reason'), {
      items: reasons.map((r) => ({ label: fmt.text(r.reason), value: r.count, color: '#f28e2b' })),
      format: fmt.int, integer: true, xLabel: 'misses', empty: 'No misses in this range',
    });

    table('prewarm-rows', [
      { key: 'game', label: 'Game' },
      { key: 'engine', label: 'Engine', get: (r) => [r.engine, r.version].filter(Boolean).join(' ') || null },
      classCol,
      { key: 'events', label: 'Events', num: true, fmt: fmt.int },
      { key: 'hits', label: 'Hits', num: true, fmt: fmt.int },
      { key: 'hit_rate', label: 'Hit rate', num: true, fmt: fmt.pct, cls: (r) => (isNum(r.hit_rate) && r.hit_rate < 0.5 ? 'bad' : '') },
      { key: 'p50_ms', label: 'p50 ms', num: true, fmt: fmt.ms, help: 'median time to have the engine ready, in milliseconds' },
      { key: 'p90_ms', label: 'p90 ms', num: true, fmt: fmt.ms, help: '90th percentile time to have the engine ready, in milliseconds' },
    ], p.rows, { sortKey: 'events' });
  }

  function renderDecode(d, win) {
    const count = d.rows.reduce((a, r) => a + num(r.count), 0);
    const fallbacks = d.rows.reduce((a, r) => a + num(r.fallbacks), 0);
    const slowest = d.rows.filter((r) => isNum(r.p90_ms)).sort((a, b) => b.p90_ms - a.p90_ms)[0];
    tiles('decode', [
      { id: 'decode-count', label: 'Decodes', value: d.rows.length ? fmt.int(count) : DASH },
      { id: 'decode-fallbacks', label: 'Fallbacks', value: d.rows.length ? fmt.int(fallbacks) : DASH },
      { id: 'decode-fallback-rate', label: 'Fallback rate', value: fmt.pct(ratio(fallbacks, count)), tone: ratio(fallbacks, count) >= 0.05 ? 'warn' : null },
      { id: 'decode-slowest', label: 'Slowest p90', value: slowest ? `${fmt.ms(slowest.p90_ms)} ms` : DASH, sub: slowest ? `${slowest.device_class} · ${slowest.variant}` : null },
      { id: 'decode-choices', label: 'Variant choices', value: fmt.int(d.choices.length) },
    ]);

    drawDecodeHourly(d, win);

    const byClass = groupBy(d.rows, (r) => r.device_class || 'unknown');
    const variants = ordered(d.rows.map((r) => r.variant || '?'), VARIANT_ORDER);
    C.bars(chart('decode-count-by-variant'), {
      items: ordered([...byClass.keys()], CLASS_ORDER).map((cls) => ({
        label: cls,
        values: variants.map((v) => {
          const n = byClass.get(cls).filter((r) => (r.variant || '?') === v).reduce((a, r) => a + num(r.count), 0);
          return { name: v, value: n, color: variantColor(v), title: `${cls} · ${v}: ${fmt.int(n)} decodes` };
        }),
      })),
      legend: variants.map((v) => ({ name: v, color: variantColor(v) })),
      format: fmt.int, integer: true, xLabel: 'decodes',
    });

    const sortedRows = d.rows.slice().sort(byClassVariant);
    table('decode-rows', [
      classCol,
      variantCol,
      { key: 'count', label: 'Count', num: true, fmt: fmt.int },
      { key: 'p50_ms', label: 'p50 ms', num: true, fmt: fmt.ms },
      { key: 'p90_ms', label: 'p90 ms', num: true, fmt: fmt.ms },
      { key: 'p99_ms', label: 'p99 ms', num: true, fmt: fmt.ms },
      { key: 'fallbacks', label: 'Fallbacks', num: true, fmt: fmt.int },
      { key: 'fallback_rate', label: 'Fallback rate', num: true, fmt: fmt.pct, cls: (r) => (r.fallback_rate >= 0.05 ? 'bad' : '') },
    ], sortedRows);

    table('decode-choices', [
      { key: 'game', label: 'Game' },
      { key: 'asset', label: 'Asset', cls: () => 'mono' },
      classCol,
      variantCol,
      { key: 'reason', label: 'Reason', cls: (r) => (r.detail ? '' : 'wrap') },
      // kiln-api sends a reason code (measured, default, slow_class) and the estimates behind it.
      ...(d.choices.some((r) => r.detail) ? [{ key: 'detail', label: 'Detail', cls: () => 'wrap' }] : []),
    ], d.choices, { sortKey: 'game', sortDir: 1, empty: 'No variant choices yet' });
  }

  // p90 per hour for one variant (one line per device class), or for all of them (one line per
  // class and variant, dashed by variant). Starts on the variant with the most decodes.
  function drawDecodeHourly(d, win) {
    const counts = new Map();
    for (const r of d.rows) counts.set(r.variant || '?', (counts.get(r.variant || '?') || 0) + num(r.count));
    const variants = ordered([...counts.keys(), ...d.hourly.map((r) => r.variant || '?')], VARIANT_ORDER);
    const busiest = [...counts].sort((a, b) => b[1] - a[1])[0];
    let chosen = state.decodeVariant;
    if (chosen !== 'all' && !variants.includes(chosen)) chosen = busiest ? busiest[0] : 'all';
    const seg = $('#decode-variant');
    seg.replaceChildren(...(variants.length > 1 ? [...variants, 'all'] : []).map((v) => {
      const b = h('button', { type: 'button', class: v === chosen ? 'on' : null, 'aria-pressed': String(v === chosen), text: v === 'all' ? 'all variants' : v });
      b.addEventListener('click', () => { state.decodeVariant = v; drawDecodeHourly(d, win); });
      return b;
    }));
    const single = chosen !== 'all';
    const groups = groupBy(d.hourly.filter((r) => !single || (r.variant || '?') === chosen), (r) => (single ? String(r.device_class || 'unknown') : `${r.device_class || 'unknown'} · ${r.variant || '?'}`));
    const keys = [...groups.keys()].sort((a, b) => byClassVariant(groups.get(a)[0], groups.get(b)[0]));
    C.line(chart('decode-p90-hourly'), {
      ...lineWin({ ...win, x0: floorHour(win.from), bucket: HOUR }),
      series: keys.map((k) => {
        const g = groups.get(k);
        return {
          name: k, color: classColor(g[0].device_class || 'unknown'), dash: single ? null : variantDash(g[0].variant),
          points: g.map((r) => ({ x: Date.parse(r.hour), y: r.p90_ms, title: `${fmt.ms(r.p90_ms)} ms (${fmt.int(r.count)} decodes${single ? ` with ${chosen}` : ''})` })),
        };
      }),
      yFormat: (v) => `${fmt.ms(v)} ms`, yTickFormat: (v) => `${NF.format(v)} ms`, yLabel: `p90 decode time${single ? `, ${chosen}` : ''}`,
    });
  }

  function renderLibrary(l) {
    const t = l.totals;
    const retire = l.entries.filter((e) => e.low_roi === true).length;
    tiles('library', [
      { id: 'library-bytes-stored', label: 'Bytes stored', value: fmt.bytes(t.bytes_stored), big: true },
      { id: 'library-bytes-saved', label: 'Bytes saved', value: fmt.bytes(t.bytes_saved), big: true, sub: 'downloads avoided by library hits' },
      { id: 'library-entries', label: 'Entries', value: fmt.int(t.entries) },
      { id: 'library-roi', label: 'Overall ROI', value: fmt.roi(ratio(t.bytes_saved, t.bytes_stored)), sub: 'bytes saved ÷ bytes stored' },
      { id: 'library-retire', label: 'Retire candidates', value: fmt.int(retire), tone: retire ? 'warn' : null, sub: 'entries flagged low ROI' },
    ]);

    const label = (e) => [e.engine, e.version].filter(Boolean).join(' ') || (e.sha256 ? String(e.sha256).slice(0, 12) : '?');
    const counts = groupBy(l.entries, label);
    const MAX_BARS = 30;
    const byRoi = l.entries.filter((e) => isNum(e.roi)).sort((a, b) => b.roi - a.roi);
    const roiChart = chart('library-roi');
    C.bars(roiChart, {
      items: byRoi.slice(0, MAX_BARS).map((e) => ({
        label: counts.get(label(e)).length > 1 ? `${label(e)} (${String(e.sha256 || '').slice(0, 8)})` : label(e),
        value: e.roi,
        color: e.low_roi ? '#d62728' : '#4e79a7',
        title: `${label(e)}: ROI ${fmt.roi(e.roi)}, ${fmt.bytes(e.bytes_saved)} saved for ${fmt.bytes(e.size)} stored${e.low_roi ? ' (low ROI: retire?)' : ''}`,
      })),
      format: fmt.roi, tickFormat: (v) => `${NF.format(v)}×`, xLabel: 'bytes saved ÷ bytes stored', empty: 'No library entries',
      legend: byRoi.length ? [{ name: 'worth keeping', color: '#4e79a7' }, { name: 'low ROI: retire?', color: '#d62728' }] : null,
    });
    if (byRoi.length > MAX_BARS) roiChart.append(h('p', { class: 'note', text: `Showing the ${MAX_BARS} highest of ${byRoi.length}; the table lists all.` }));

    table('library-entries', [
      { key: 'engine', label: 'Engine' },
      { key: 'version', label: 'Version' },
      { key: 'sha256', label: 'SHA-256', fmt: (v) => (v ? `${String(v).slice(0, 12)}…` : DASH), title: (r) => r.sha256 || null, cls: () => 'mono' },
      { key: 'size', label: 'Size', num: true, fmt: fmt.bytes },
      { key: 'games', label: 'Games', num: true, fmt: fmt.int },
      { key: 'live_builds', label: 'Live builds', num: true, fmt: (v, r) => (isNum(r.builds) ? `${fmt.int(v)} of ${fmt.int(r.builds)}` : fmt.int(v)), help: 'live builds using the entry, of all builds that did' },
      { key: 'hits', label: 'Hits', num: true, fmt: fmt.int },
      { key: 'misses', label: 'Misses', num: true, fmt: fmt.int },
      { key: 'bytes_saved', label: 'Bytes saved', num: true, fmt: fmt.bytes },
      { key: 'roi', label: 'ROI', num: true, fmt: fmt.roi, help: 'bytes saved ÷ bytes stored' },
      { key: 'low_roi', label: 'Retire?', fmt: (v) => (v ? h('span', { class: 'badge warn', text: 'retire?' }) : ''), sortBy: (r) => (r.low_roi ? 1 : 0) },
    ], l.entries, { sortKey: 'roi', rowClass: (r) => (r.low_roi ? 'low-roi' : null), empty: 'The library is empty' });
  }

  function renderPipeline(p, win) {
    const q = p.queue;
    const status = p.builds_by_status;
    const statuses = ordered(Object.keys(status), ['queued', 'processing', 'published', 'failed']);
    tiles('pipeline', [
      { id: 'pipeline-queue-depth', label: 'Queue depth', value: fmt.int(q.depth), big: true, sub: 'builds waiting for a worker' },
      { id: 'pipeline-oldest-age', label: 'Oldest queued', value: fmt.age(q.oldest_age_seconds), tone: num(q.oldest_age_seconds) > 600 ? 'warn' : null },
      ...statuses.map((s) => ({ id: `pipeline-builds-${s}`, label: `Builds ${s}`, value: fmt.int(status[s]), tone: s === 'failed' && num(status[s]) > 0 ? 'bad' : null })),
      {
        id: 'pipeline-image-bytes-saved', label: 'Image bytes saved', value: fmt.bytes(p.images.bytes_saved),
        sub: `images stage, ${fmt.int(p.images.builds)} newest published builds: ${fmt.bytes(p.images.bytes_before)} → ${fmt.bytes(p.images.bytes_after)}`,
      },
    ]);

    const buckets = new Map();
    for (const r of p.hourly) {
      const t = Date.parse(r.hour);
      if (Number.isNaN(t)) continue;
      const x = Math.floor(t / win.bucket) * win.bucket;
      const b = buckets.get(x) || { published: 0, failed: 0 };
      b.published += num(r.published);
      b.failed += num(r.failed);
      buckets.set(x, b);
    }
    const xs = [];
    if (buckets.size) { // a bucket without a row: nothing finished then
      const last = Math.max(win.x1, ...buckets.keys());
      for (let x = Math.min(win.x0, ...buckets.keys()); x <= last && xs.length < 2000; x += win.bucket) xs.push(x);
    }
    const counted = (field) => xs.map((x) => {
      const v = buckets.has(x) ? buckets.get(x)[field] : 0;
      return { x, y: v, title: `${fmt.int(v)} ${field}` };
    });
    caption('pipeline-builds-hourly', `Builds finished per ${win.per}`);
    C.line(chart('pipeline-builds-hourly'), {
      ...lineWin(win),
      series: xs.length ? [
        { name: 'published', color: STATUS_COLORS.published, points: counted('published') },
        { name: 'failed', color: STATUS_COLORS.failed, points: counted('failed') },
      ] : [],
      integer: true, yFormat: fmt.int, yLabel: `builds per ${win.per}`, empty: 'No builds finished in this range',
    });

    C.bars(chart('pipeline-stage-p90'), {
      items: p.stages.map((s) => ({ label: fmt.text(s.stage), value: s.p90_seconds, color: '#4e79a7', title: `${s.stage}: p90 ${fmt.secs(s.p90_seconds)} s, p50 ${fmt.secs(s.p50_seconds)} s` })),
      format: (v) => (isNum(v) ? `${fmt.secs(v)} s` : DASH), tickFormat: (v) => `${NF.format(v)} s`, xLabel: 'p90 seconds', empty: 'No stage ran in this range',
    });

    table('pipeline-stages', [
      { key: 'stage', label: 'Stage' },
      { key: 'succeeded', label: 'Succeeded', num: true, fmt: fmt.int },
      { key: 'failed', label: 'Failed', num: true, fmt: fmt.int, cls: (r) => (num(r.failed) > 0 ? 'bad' : '') },
      { key: 'failure_rate', label: 'Failure rate', num: true, get: (r) => ratio(num(r.failed), num(r.succeeded) + num(r.failed)), fmt: fmt.pct },
      { key: 'p50_seconds', label: 'p50 s', num: true, fmt: fmt.secs },
      { key: 'p90_seconds', label: 'p90 s', num: true, fmt: fmt.secs },
    ], p.stages);

    table('pipeline-failures', [
      { key: 'at', label: 'When', fmt: fmt.time, sortBy: (r) => Date.parse(r.at) || null },
      { key: 'game', label: 'Game' },
      { key: 'version', label: 'Version' },
      { key: 'stage', label: 'Stage' },
      { key: 'build_id', label: 'Build', fmt: (v) => (v ? String(v).slice(0, 8) : DASH), title: (r) => r.build_id || null, cls: () => 'mono' },
      { key: 'error', label: 'Error', cls: () => 'wrap error-text' },
    ], p.recent_failures, { sortKey: 'at', empty: 'No failed builds in this range' });
  }

  // ---- wiring ---------------------------------------------------------------------------
  function start() {
    applyFragment();
    writeFragment();
    syncControls();

    $('#filter-game').addEventListener('change', (e) => { state.game = e.target.value; writeFragment(); load(); });
    $('#filter-range').addEventListener('change', (e) => { state.range = e.target.value; writeFragment(); load(); });
    $('#refresh').addEventListener('click', () => load());
    $('#change-token').addEventListener('click', async () => { await logout(); clearError(); askToken(); });
    $('#token-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const token = $('#token-input').value.trim();
      if (!token) return;
      $('#token-input').value = '';
      state.login = login(token);
      clearError();
      load();
    });
    for (const b of document.querySelectorAll('.view-nav [data-target]')) {
      b.addEventListener('click', () => document.querySelector(`[data-view="${b.dataset.target}"]`).scrollIntoView({ behavior: 'smooth', block: 'start' }));
    }
    window.addEventListener('hashchange', () => {
      applyFragment();
      writeFragment();
      syncControls();
      load();
    });
    let resize = 0;
    window.addEventListener('resize', () => {
      clearTimeout(resize);
      resize = setTimeout(() => { if (state.data && document.body.dataset.state === 'ready') render(state.data); }, 150);
    });
    load();
  }

  start();
})();
