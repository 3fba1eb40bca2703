#!/usr/bin/env node
// What a player downloads, as measured: loads a game URL once in headless Chromium (fresh
// profile, no throttling), waits until the page sets data-state=ready and renders, and prints
// every request the page made (path, status, bytes transferred, cache) and their total.
//
//   node bench/load/page-bytes.mjs http://127.0.0.1:8081/play/sample-game/ [--json] [--timeout-ms 120000]
//
// Exit 0 when the page got ready without errors, 1 when it did not, 2 on bad usage.
import { parseArgs } from 'node:util';
import { DEADLINE_MS, pageBytes } from './lib/browser.mjs';
import { human } from './lib/waterfall.mjs';

function usage(msg) {
  if (msg) console.error(msg);
  console.error('usage: node bench/load/page-bytes.mjs URL [--json] [--timeout-ms N]');
  process.exit(2);
}

let args;
try {
  args = parseArgs({
    allowPositionals: true,
    options: { json: { type: 'boolean', default: false }, 'timeout-ms': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
} catch (e) {
  usage(e.message);
}
if (args.values.help || args.positionals.length !== 1) usage();
const url = args.positionals[0];
try {
  new URL(url);
} catch {
  usage(`not a URL: ${url}`);
}
const deadlineMs = Number(args.values['timeout-ms'] ?? DEADLINE_MS);

const m = await pageBytes(url, { deadline: deadlineMs });
const ok = m.firstFrame != null && m.errors.length === 0;
if (args.values.json) {
  console.log(JSON.stringify({ ok, url, firstFrame: m.firstFrame, totals: m.totals, requests: m.requests, errors: m.errors }));
} else {
  const net = m.requests.filter((r) => !r.local);
  const w = Math.min(70, Math.max(4, ...net.map((r) => r.path.length)));
  console.log(`what a player downloads (${url}, measured in headless Chromium, fresh profile, no throttling):`);
  console.log(`  ${'path'.padEnd(w)} ${'status'.padStart(6)} ${'transferred'.padStart(12)} ${'body'.padStart(10)}  encoding  cache`);
  for (const r of net) {
    const path = r.path.length > w ? `${r.path.slice(0, w - 1)}…` : r.path;
    console.log(
      `  ${path.padEnd(w)} ${String(r.failed ? 'failed' : r.status ?? '-').padStart(6)} ${String(r.transferred ?? 0).padStart(12)} ${String(r.bytes ?? 0).padStart(10)}  ${(r.encoding ?? '-').padEnd(8)}  ${r.cache ?? '-'}`,
    );
  }
  const t = m.totals;
  console.log(`  total: ${t.requests} requests, ${t.transferred} bytes transferred (${human(t.transferred)}), ${t.decoded} bytes of bodies, ${t.fromCache} from cache`);
  console.log(`  ready at ${m.readyAt ?? '-'} ms, first frame at ${m.firstFrame ?? '-'} ms`);
  for (const e of m.errors) console.log(`  error: ${e}`);
}
process.exitCode = ok ? 0 : 1;
