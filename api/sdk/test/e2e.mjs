#!/usr/bin/env node
// Opens pages in headless Chromium and reports what Kiln's loader did on each.
//
//   node api/sdk/test/e2e.mjs --steps steps.json [--timeout-ms 15000]
//
// steps.json: [{"open": "<url>", "wait_for": "<JS expression>", "new_context": false,
//               "run": "<optional JS expression evaluated after the page opens>",
//               "eval": "<optional JS expression evaluated after wait_for; awaited; its
//                        JSON value is the line's `result`>",
//               "routes": [{"url": "<URL; without a query it matches any query>", "status": 200, "headers": {...},
//                           "body_base64": "..."}],   // answered instead of the network
//               "timeout_ms": 15000}, ...]
// All steps share one browser context (one Cache Storage, one localStorage) unless a step
// says new_context. Each step prints one JSON line on stdout:
//   {"url": ..., "events": kiln.events, "started": <wait_for became truthy>, "console_errors": [...],
//    "result": <eval's value, when the step has one>}
// Exit status: 0 when every step started, 1 when one did not, 2 on bad usage.
// Chromium: /usr/bin/chromium, or KILN_CHROMIUM.
//
// Run with no arguments by `node --test api/sdk/test/`, it tests itself against a local server.

import fs from 'node:fs';
import { fileURLToPath } from 'node:url';

import { launchChromium } from './support.mjs';

const SETTLE_MS = 250; // lets beacons queued in the last tick leave before the page goes

export async function runSteps(steps, { timeoutMs = 15000, print = (line) => process.stdout.write(`${line}\n`) } = {}) {
  const browser = await launchChromium();
  const results = [];
  let ctx = null;
  try {
    for (const step of steps) {
      if (!step || typeof step.open !== 'string') throw new Error(`step without "open": ${JSON.stringify(step)}`);
      if (!ctx || step.new_context) {
        await ctx?.close();
        ctx = await browser.newContext();
      }
      const limit = step.timeout_ms ?? timeoutMs;
      const page = await ctx.newPage();
      for (const route of step.routes ?? []) {
        // The URL without a query matches it with any query (the loader adds its device's).
        const target = new URL(route.url);
        const matches = (u) => u.origin === target.origin && u.pathname === target.pathname
          && (target.search === '' || u.search === target.search);
        await page.route(matches, (r) => r.fulfill({
          status: route.status ?? 200,
          headers: route.headers ?? {},
          body: Buffer.from(route.body_base64 ?? '', 'base64'),
        }));
      }
      let result;
      const errors = [];
      page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
      page.on('pageerror', (e) => errors.push(String(e?.message ?? e)));
      let started = false;
      try {
        await page.goto(step.open, { waitUntil: 'domcontentloaded', timeout: limit });
        if (step.run) await page.evaluate(step.run);
        if (step.wait_for) await waitFor(page, step.wait_for, limit);
        started = true;
        if (step.eval) result = await page.evaluate(step.eval);
      } catch (e) {
        errors.push(`e2e: ${String(e?.message ?? e).split('\n')[0]}`);
      }
      await page.waitForTimeout(SETTLE_MS);
      const events = await page
        .evaluate(() => (globalThis.kiln && Array.isArray(globalThis.kiln.events) ? globalThis.kiln.events : []))
        .catch(() => []);
      const line = { url: step.open, events, started, console_errors: errors };
      if (step.eval) line.result = result ?? null;
      results.push(line);
      print(JSON.stringify(line));
      // Leaving the page fires pagehide (the loader reports engines preheated but never used).
      await page.goto('about:blank').catch(() => {});
      await page.close();
    }
    await new Promise((r) => setTimeout(r, SETTLE_MS));
  } finally {
    await browser.close();
  }
  return results;
}

function usage(message) {
  if (message) process.stderr.write(`e2e: ${message}\n`);
  process.stderr.write('usage: node api/sdk/test/e2e.mjs --steps steps.json [--timeout-ms N]\n');
  process.exit(2);
}

// Polls `expr` from here (the DevTools protocol's evaluate) rather than inside the page
// (`waitForFunction` polls with eval): a page whose CSP forbids eval — the dashboard's — is
// waited on too, on a busy machine where the first check comes too early.
async function waitFor(page, expr, limit) {
  const deadline = Date.now() + limit;
  for (;;) {
    if (await page.evaluate(expr).catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${limit} ms waiting for ${expr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function main(argv) {
  let stepsFile = null;
  let timeoutMs = 15000;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--steps') stepsFile = argv[++i];
    else if (argv[i] === '--timeout-ms') timeoutMs = Number(argv[++i]);
    else usage(`unknown argument ${argv[i]}`);
  }
  if (!stepsFile) usage('--steps is required');
  if (!(timeoutMs > 0)) usage('--timeout-ms must be a positive number');
  let steps;
  try {
    steps = JSON.parse(fs.readFileSync(stepsFile === '-' ? 0 : stepsFile, 'utf8'));
  } catch (e) {
    usage(`cannot read steps: ${e.message}`);
  }
  if (!Array.isArray(steps)) usage('steps must be a JSON array');
  const results = await runSteps(steps, { timeoutMs });
  process.exit(results.every((r) => r.started) ? 0 : 1);
}

async function selfTest() {
  const assert = (await import('node:assert/strict')).default;
  const os = await import('node:os');
  const path = await import('node:path');
  const { test } = await import('node:test');
  const { gamePage, makeEngine, publish, runSelf, startServer } = await import('./support.mjs');

  test('e2e.mjs runs steps in one context and prints one JSON line per step', async () => {
    const srv = await startServer();
    try {
      const eng = makeEngine({ version: '0.9.0' });
      const d = publish(srv, 'e2e', eng, { gameDir: '/g/e2e' });
      srv.set('/g/e2e/game.js', 'window.gameStarted = FAKEENGINE.version === "0.9.0";');
      const page = srv.set('/g/e2e/index.html', gamePage(
        { game: 'e2e', telemetry: `${srv.origin}/v1/telemetry`, keys: srv.trusted, engines: [d] },
        '<script type="text/kiln-deferred" src="game.js"></script>',
      ));
      const never = srv.set('/g/e2e/never.html', '<!doctype html><script>console.error("boom")</script>');
      const steps = [
        { open: page, wait_for: 'window.gameStarted' },
        { open: page, wait_for: 'window.gameStarted' },
        { open: page, wait_for: 'window.gameStarted', new_context: true },
        { open: never, wait_for: 'window.gameStarted', timeout_ms: 500 },
      ];
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2e-')), 'steps.json');
      fs.writeFileSync(file, JSON.stringify(steps));
      // The server answering the child lives in this process.
      const run = await runSelf(fileURLToPath(import.meta.url), ['--steps', file]);
      assert.equal(run.status, 1, `one step never started\n${run.stderr}`);
      const lines = run.stdout.trim().split('\n').map((l) => JSON.parse(l));
      assert.equal(lines.length, 4);
      assert.deepEqual(lines.map((l) => l.started), [true, true, true, false]);
      assert.deepEqual(lines.map((l) => l.url), steps.map((s) => s.open));
      const outcome = (l) => l.events.filter((e) => e.type === 'preheat').map((e) => `${e.outcome}/${e.reason}`);
      assert.deepEqual(outcome(lines[0]), ['miss/cold']);
      assert.deepEqual(outcome(lines[1]), ['hit/null'], 'same context: Cache Storage shared');
      assert.deepEqual(outcome(lines[2]), ['miss/cold'], 'new context: fresh storage');
      assert.deepEqual(lines[0].console_errors, []);
      assert.ok(lines[3].console_errors.includes('boom'));
      assert.deepEqual(lines[3].events, []);
      assert.equal((await srv.beaconEvents('e2e', 3)).length, 3);
    } finally {
      await srv.close();
    }
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  if (process.argv.length <= 2 && process.env.NODE_TEST_CONTEXT) await selfTest();
  else await main(process.argv.slice(2));
}
