// Headless Chromium, network/CPU throttling over CDP, per-request capture from CDP Network
// events, and the first-frame measurement. Shared by run.mjs and page-bytes.mjs.
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';

export const DEADLINE_MS = 120_000;

/** Network and CPU profiles (CDP Network.emulateNetworkConditions + Emulation.setCPUThrottlingRate). */
export const PROFILES = {
  slow4g: { latency: 150, down: 1.6e6, up: 750e3, cpu: 4, viewport: { width: 412, height: 823 }, label: 'slow 4G phone' },
  fast4g: { latency: 40, down: 9e6, up: 1.5e6, cpu: 4, viewport: { width: 412, height: 823 }, label: 'fast 4G phone' },
  cable: { latency: 28, down: 5e6, up: 1e6, cpu: 1, viewport: { width: 1280, height: 800 }, label: 'cable desktop' },
  none: { latency: 0, down: -1, up: -1, cpu: 1, viewport: { width: 1280, height: 800 }, label: 'no throttling' },
};

export function chromiumPath() {
  const p = process.env.KILN_CHROMIUM || '/usr/bin/chromium';
  if (!existsSync(p)) throw new Error(`no Chromium at ${p} (apt-get install chromium, or set KILN_CHROMIUM)`);
  return p;
}

export function launchChromium() {
  // WebGL through SwiftShader, so three.js, Phaser and Pixi render headless (as the repo's
  // other browser tests do). Background throttling off: a headless tab must not be slowed
  // down for being "hidden".
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: [
      '--no-sandbox',
      '--use-angle=swiftshader',
      '--enable-unsafe-swiftshader',
      '--ignore-gpu-blocklist',
      '--disable-background-timer-throttling',
      '--disable-renderer-backgrounding',
      '--disable-backgrounding-occluded-windows',
      '--no-first-run',
      '--no-default-browser-check',
    ],
  });
}

/**
 * Injected into every document before any of its scripts (context.addInitScript), the same
 * for raw and Kiln. `ready` is when `document.body.dataset.state` becomes `'ready'` (seen by a
 * MutationObserver, or at the next rAF callback); the **first frame** is the first
 * requestAnimationFrame callback that starts after that, as performance.now() (ms since the
 * navigation started). `frames` counts the distinct animation frames in which the page's own
 * rAF callbacks ran during the FRAME_WINDOW_MS from the first frame on (the first included);
 * `framesAfterReady1s` the same in the FRAME_WINDOW_MS after ready; `rendered` all of them.
 */
export const MEASURE_SCRIPT = `(() => {
  if (window.top !== window || window.__kilnBench) return;
  const FRAME_WINDOW_MS = 1000;
  const M = { readyAt: null, firstFrame: null, firstFrameTs: null, frames: 0, framesAfterReady1s: 0, rendered: 0, state: null, errors: [] };
  Object.defineProperty(window, '__kilnBench', { value: M });
  const now = () => performance.now();
  const check = () => {
    const b = document.body;
    const s = b && b.dataset ? b.dataset.state : undefined;
    if (s !== undefined) M.state = s;
    if (M.readyAt == null && s === 'ready') M.readyAt = now();
  };
  new MutationObserver(check).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-state'], childList: true });
  const raf = window.requestAnimationFrame;
  let lastTs = null;
  window.requestAnimationFrame = function (cb) {
    return raf.call(window, function (ts) {
      if (M.readyAt == null) check();
      if (M.readyAt != null) {
        const t = now();
        if (M.firstFrame == null && t > M.readyAt) { M.firstFrame = t; M.firstFrameTs = ts; }
        if (M.firstFrame != null && ts !== lastTs) {
          lastTs = ts;
          M.rendered++;
          if (t - M.firstFrame <= FRAME_WINDOW_MS) M.frames++;
          if (t - M.readyAt <= FRAME_WINDOW_MS) M.framesAfterReady1s++;
        }
      }
      return cb(ts);
    });
  };
  addEventListener('error', (e) => { M.errors.push(String(e.message || e.type) + (e.filename ? ' @ ' + e.filename : '')); });
  addEventListener('unhandledrejection', (e) => { M.errors.push('unhandled rejection: ' + String(e.reason && e.reason.message || e.reason)); });
})();`;

/** Opens a browser context set up for a profile (fresh profile: nothing cached). */
export async function newContext(browser, profile) {
  const context = await browser.newContext({ viewport: profile.viewport, deviceScaleFactor: 1 });
  await context.addInitScript({ content: MEASURE_SCRIPT });
  return context;
}

/** Applies the profile's network and CPU throttling to the page's target (before navigation). */
export async function applyProfile(cdp, profile) {
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false,
    latency: profile.latency,
    downloadThroughput: profile.down > 0 ? profile.down / 8 : -1,
    uploadThroughput: profile.up > 0 ? profile.up / 8 : -1,
  });
  await cdp.send('Emulation.setCPUThrottlingRate', { rate: profile.cpu });
}

/**
 * Every request of one page (its target) from CDP Network events. Each request gets the
 * `phase` that was current when it started, and the loaderId of the document it belongs to.
 */
export class RequestLog {
  constructor(cdp) {
    this.cdp = cdp;
    this.byId = new Map();
    this.all = [];
    this.phase = null;
    this.lastActivity = Date.now();
    const on = (ev, fn) => cdp.on(ev, (e) => {
      this.lastActivity = Date.now();
      fn(e);
    });
    on('Network.requestWillBeSent', (e) => {
      let r = this.byId.get(e.requestId);
      if (r && e.redirectResponse) {
        r.redirects.push({ url: r.url, status: e.redirectResponse.status });
        r.url = e.request.url;
        return;
      }
      r = {
        id: e.requestId,
        url: e.request.url,
        method: e.request.method,
        type: e.type || null,
        loaderId: e.loaderId,
        frameId: e.frameId,
        initiator: e.initiator && e.initiator.type,
        phase: this.phase,
        ts: e.timestamp,
        wall: e.wallTime,
        redirects: [],
        status: null,
        mimeType: null,
        encoding: null,
        cacheControl: null,
        protocol: null,
        fromDiskCache: false,
        fromMemoryCache: false,
        fromServiceWorker: false,
        servedFromCache: false,
        responseTs: null,
        endTs: null,
        encodedDataLength: 0,
        dataLength: 0,
        failed: false,
        canceled: false,
        errorText: null,
        timing: null,
      };
      this.byId.set(e.requestId, r);
      this.all.push(r);
    });
    on('Network.requestServedFromCache', (e) => {
      const r = this.byId.get(e.requestId);
      if (r) r.servedFromCache = true;
    });
    on('Network.responseReceived', (e) => {
      const r = this.byId.get(e.requestId);
      if (!r) return;
      const res = e.response;
      const h = lowerKeys(res.headers || {});
      Object.assign(r, {
        status: res.status,
        mimeType: res.mimeType,
        encoding: h['content-encoding'] || null,
        cacheControl: h['cache-control'] || null,
        protocol: res.protocol || null,
        fromDiskCache: !!res.fromDiskCache,
        fromServiceWorker: !!res.fromServiceWorker,
        // First byte as the network stack saw it (the event's own timestamp can come later).
        responseTs: res.timing && res.timing.receiveHeadersEnd >= 0 ? res.timing.requestTime + res.timing.receiveHeadersEnd / 1000 : e.timestamp,
        timing: res.timing
          ? pick(res.timing, ['requestTime', 'dnsStart', 'connectStart', 'connectEnd', 'sendStart', 'sendEnd', 'receiveHeadersEnd'])
          : null,
        type: e.type || r.type,
      });
    });
    on('Network.dataReceived', (e) => {
      const r = this.byId.get(e.requestId);
      if (r) r.dataLength += e.dataLength;
    });
    on('Network.loadingFinished', (e) => {
      const r = this.byId.get(e.requestId);
      if (!r) return;
      r.endTs = e.timestamp;
      r.encodedDataLength = e.encodedDataLength;
      r.fromMemoryCache = r.servedFromCache && !r.fromDiskCache;
    });
    on('Network.loadingFailed', (e) => {
      const r = this.byId.get(e.requestId);
      if (!r) return;
      r.endTs = e.timestamp;
      r.failed = true;
      r.canceled = !!e.canceled;
      r.errorText = e.errorText || null;
      r.type = e.type || r.type;
    });
  }

  /** Requests still in flight (started, neither finished nor failed), network only. */
  inflight() {
    return this.all.filter((r) => r.endTs == null && /^https?:/.test(r.url)).length;
  }

  /**
   * Waits until the page's network is idle: nothing in flight and no network event for
   * `quietMs`. Returns false (and stops waiting) at the deadline.
   */
  async waitIdle({ quietMs = 500, deadlineMs = DEADLINE_MS } = {}) {
    const t0 = Date.now();
    while (Date.now() - t0 < deadlineMs) {
      if (this.inflight() === 0 && Date.now() - this.lastActivity >= quietMs) return true;
      await new Promise((r) => setTimeout(r, 50));
    }
    return false;
  }

  static async attach(context, page) {
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable', { maxTotalBufferSize: 0, maxResourceBufferSize: 0 });
    return new RequestLog(cdp);
  }

  /**
   * The requests of the document navigated to in `phase`, with times in ms relative to that
   * document's time origin (`timeOrigin`: performance.timeOrigin, epoch ms).
   */
  documentRequests(phase, url, timeOrigin) {
    const doc = this.all.find((r) => r.phase === phase && r.type === 'Document' && (r.url === url || r.redirects.some((x) => x.url === url)));
    if (!doc) return { doc: null, requests: [] };
    const toPage = (ts) => (ts == null ? null : round1((doc.wall + (ts - doc.ts)) * 1000 - timeOrigin));
    const requests = this.all
      .filter((r) => r === doc || (r.loaderId === doc.loaderId && r.id !== doc.id && !r.url.startsWith('data:')))
      .map((r) => summarize(r, toPage));
    return { doc, requests };
  }
}

function lowerKeys(h) {
  const o = {};
  for (const [k, v] of Object.entries(h)) o[k.toLowerCase()] = v;
  return o;
}
function pick(o, keys) {
  const out = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}
function round1(x) {
  return Math.round(x * 10) / 10;
}

function summarize(r, toPage) {
  const u = new URL(r.url);
  const local = u.protocol === 'blob:' || u.protocol === 'data:';
  const cache = r.fromMemoryCache ? 'memory' : r.fromDiskCache ? 'disk' : r.fromServiceWorker ? 'service-worker' : null;
  // A memory-cache hit carries the timing of the request that filled the cache: its first
  // byte is then outside [start, end], and the hit's own start is what counts.
  const start = toPage(r.ts);
  const end = toPage(r.endTs);
  let response = toPage(r.responseTs);
  if (response != null && start != null && (response < start || (end != null && response > end))) response = start;
  return {
    url: r.url,
    path: local ? `${u.protocol}…` : u.pathname + u.search,
    type: r.type,
    method: r.method,
    status: r.status,
    mimeType: r.mimeType,
    encoding: r.encoding,
    cacheControl: r.cacheControl,
    cache,
    local,
    start,
    response,
    end,
    transferred: r.encodedDataLength,
    bytes: r.dataLength,
    failed: r.failed,
    canceled: r.canceled,
    errorText: r.errorText,
  };
}

/** Totals over network requests (blob:/data: excluded). */
export function totals(requests) {
  const net = requests.filter((r) => !r.local);
  return {
    requests: net.length,
    transferred: net.reduce((s, r) => s + (r.transferred || 0), 0),
    decoded: net.reduce((s, r) => s + (r.bytes || 0), 0),
    fromCache: net.filter((r) => r.cache).length,
    failed: net.filter((r) => r.failed || (r.status != null && r.status >= 400)).length,
  };
}

/**
 * Navigates `page` to `url` (throttling already applied) and waits, with generous deadlines,
 * until the page is ready, has shown its first frame after ready, has had FRAME_WINDOW_MS to
 * render more, and its load event has fired (or it reported an error).
 */
export async function visit(page, log, url, { phase, deadlineMs = DEADLINE_MS, settle = true, until = 'frame' } = {}) {
  log.phase = phase;
  const errors = [];
  const onError = (e) => errors.push(`pageerror: ${e.message}`);
  const onConsole = (m) => {
    if (m.type() === 'error') errors.push(`console.error: ${m.text()}`);
  };
  page.on('pageerror', onError);
  page.on('console', onConsole);
  const t0 = Date.now();
  let timedOut = false;
  try {
    await page.goto(url, { waitUntil: 'commit', timeout: deadlineMs });
    await page.waitForFunction(
      ([settleMs, untilReady]) => {
        const M = window.__kilnBench;
        if (!M) return false;
        const s = document.body && document.body.dataset.state;
        if (M.state === 'error' || s === 'error') return true;
        if (untilReady) return s === 'ready';
        if (M.firstFrame == null) return false;
        // Settled: loaded, a second frame rendered (the game keeps rendering), and settleMs
        // after the first frame (so frames covers its whole window).
        return document.readyState === 'complete' && (settleMs === 0 || (M.rendered >= 2 && performance.now() >= M.firstFrame + settleMs));
      },
      [settle ? 1000 : 0, until === 'ready'],
      { polling: 100, timeout: Math.max(1000, deadlineMs - (Date.now() - t0)) },
    );
  } catch (e) {
    timedOut = true;
    errors.push(`deadline: ${String(e.message).split('\n')[0]}`);
  }
  const m = await page
    .evaluate(() => {
      const M = window.__kilnBench || {};
      const nav = performance.getEntriesByType('navigation')[0];
      return {
        timeOrigin: performance.timeOrigin,
        url: location.href,
        readyAt: M.readyAt ?? null,
        firstFrame: M.firstFrame ?? null,
        frames: M.frames ?? 0,
        framesAfterReady1s: M.framesAfterReady1s ?? 0,
        rendered: M.rendered ?? 0,
        state: document.body ? document.body.dataset.state ?? null : null,
        errors: M.errors || [],
        nav: nav
          ? {
              responseStart: nav.responseStart,
              responseEnd: nav.responseEnd,
              domInteractive: nav.domInteractive,
              domContentLoaded: nav.domContentLoadedEventStart,
              load: nav.loadEventStart,
              transferSize: nav.transferSize,
            }
          : null,
        kiln: globalThis.kiln && Array.isArray(globalThis.kiln.events)
          ? globalThis.kiln.events.filter((e) => e.type !== 'decode').map((e) => ({ type: e.type, engine: e.engine, outcome: e.outcome, reason: e.reason, ms: e.ms, prewarmed: e.prewarmed }))
          : null,
        // The rewritten page's boot stub (when there is one): what each engine's copy did.
        boot: globalThis.__kilnBoot && globalThis.__kilnBoot.states
          ? Object.entries(globalThis.__kilnBoot.states).map(([sha, s]) => ({ sha256: sha, state: s && s.state, at: s && s.at }))
          : null,
        host: window.__host ?? null,
      };
    })
    .catch((e) => ({ errors: [`evaluate: ${e.message}`] }));
  page.off('pageerror', onError);
  page.off('console', onConsole);
  // Give the last loadingFinished events a moment to arrive over CDP (no timing depends on it).
  await new Promise((r) => setTimeout(r, 50));
  const { requests } = m.timeOrigin ? log.documentRequests(phase, url, m.timeOrigin) : { requests: [] };
  return {
    url,
    wallMs: Date.now() - t0,
    timedOut,
    readyAt: round(m.readyAt),
    firstFrame: round(m.firstFrame),
    frames: m.frames ?? 0,
    framesAfterReady1s: m.framesAfterReady1s ?? 0,
    rendered: m.rendered ?? 0,
    state: m.state ?? null,
    domContentLoaded: round(m.nav?.domContentLoaded),
    load: round(m.nav?.load),
    responseStart: round(m.nav?.responseStart),
    kiln: m.kiln ?? null,
    boot: m.boot ?? null,
    host: m.host ?? null,
    errors: [...errors, ...(m.errors || [])],
    requests,
    totals: totals(requests),
  };
}

function round(x) {
  return x == null || Number.isNaN(x) ? null : round1(x);
}

/** One fresh page in `context`, throttled with `profile`, with its request log. */
export async function openPage(context, profile) {
  const page = await context.newPage();
  const log = await RequestLog.attach(context, page);
  await applyProfile(log.cdp, profile);
  return { page, log };
}

/**
 * Loads `url` once in a fresh profile without throttling (its own browser) and returns the
 * measured visit: what a player downloads (page-bytes.mjs prints it).
 */
export async function pageBytes(url, { deadline = DEADLINE_MS } = {}) {
  const browser = await launchChromium();
  try {
    const context = await newContext(browser, PROFILES.none);
    const { page, log } = await openPage(context, PROFILES.none);
    return await visit(page, log, url, { phase: 'measured', deadlineMs: deadline });
  } finally {
    await browser.close().catch(() => {});
  }
}
