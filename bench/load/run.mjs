#!/usr/bin/env node
// Kiln load-time benchmark (issue 13): the same game builds served by Kiln (/play/{game}/) and
// by a plain nginx (/raw/{game}/), loaded in throttled headless Chromium; time to first frame,
// bytes and requests per build × profile × case × server. See README.md.
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { applyProfile, launchChromium, newContext, openPage, PROFILES, visit } from './lib/browser.mjs';
import { findKiln, Kiln, killAll, Nginx } from './lib/servers.mjs';
import { bootstrapRatio, median, quantile } from './lib/stats.mjs';
import { human, waterfallSvg, waterfallText } from './lib/waterfall.mjs';
import { zipDir } from './lib/zip.mjs';
import { prepare } from './prepare.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');

const ALL_PROFILES = ['slow4g', 'fast4g', 'cable'];
const ALL_CASES = ['cold', 'library', 'prewarm', 'repeat'];
// Files a game directory holds for its developers, not for players (as `kiln-api --demo`).
const SKIPPED = ['node_modules', 'package.json', 'package-lock.json', 'copy-engine.mjs'];

const BUILDS = {
  sample: { dir: join(repo, 'examples/sample-game'), engine: 'three', label: 'three.js sample game (examples/sample-game)' },
  phaser: { dir: join(here, 'builds/phaser'), engine: 'phaser', label: 'Phaser 3 game (bench/load/builds/phaser)' },
  pixi: { dir: join(here, 'builds/pixi'), engine: 'pixi.js', label: 'PixiJS 8 page (bench/load/builds/pixi)' },
  // The same 2D builds with lossy images on at the default bound (ssimulacra2 >= 80): the
  // build's kiln.toml is its only difference (nginx serves the same original files).
  'phaser-lossy': { dir: join(here, 'builds/phaser'), engine: 'phaser', label: 'Phaser 3 game, kiln.toml [images] lossy = true', kilnToml: '[images]\nlossy = true\n' },
  'pixi-lossy': { dir: join(here, 'builds/pixi'), engine: 'pixi.js', label: 'PixiJS 8 page, kiln.toml [images] lossy = true', kilnToml: '[images]\nlossy = true\n' },
};
const HOST = 'lb-host';
const gameName = (build, twin = false) => `lb-${build}${twin ? '-twin' : ''}`;

function usage(code = 0) {
  console.log(`usage: node bench/load/run.mjs [options]
  --runs N              runs per build × profile × case × server (default 10)
  --profiles LIST       ${ALL_PROFILES.join(',')} (default: all)
  --cases LIST          ${ALL_CASES.join(',')} (default: all)
  --builds LIST         ${Object.keys(BUILDS).join(',')} (default: all)
  --quick               CI smoke run: all builds, slow4g, cold + library, 2 runs
  --kiln-bin PATH       kiln-api binary (default: $CARGO_TARGET_DIR or target/, release then debug)
  --out FILE            JSON with every run (default: bench/load/results/load-<time>.json)
  --waterfall-dir DIR   SVG waterfalls (default: docs/images/; with --quick: beside --out)
  --waterfalls LIST     profile:case pairs to draw (default: slow4g:cold,slow4g:library)
  --keep-scratch        keep the scratch folder (Kiln data, nginx config, logs)
  --from FILE           no runs: print the tables and draw the waterfalls again from a results file`);
  process.exit(code);
}

function options() {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string' },
      profiles: { type: 'string' },
      cases: { type: 'string' },
      builds: { type: 'string' },
      quick: { type: 'boolean', default: false },
      'kiln-bin': { type: 'string' },
      out: { type: 'string' },
      'waterfall-dir': { type: 'string' },
      waterfalls: { type: 'string' },
      'keep-scratch': { type: 'boolean', default: false },
      from: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) usage(0);
  const list = (v, all, name) => {
    const xs = v ? v.split(',').map((s) => s.trim()).filter(Boolean) : all;
    for (const x of xs) if (!all.includes(x)) throw new Error(`--${name}: unknown ${x} (known: ${all.join(', ')})`);
    return xs;
  };
  const q = values.quick;
  const o = {
    runs: Number(values.runs ?? (q ? 2 : 10)),
    profiles: list(values.profiles ?? (q ? 'slow4g' : undefined), ALL_PROFILES, 'profiles'),
    cases: list(values.cases ?? (q ? 'cold,library' : undefined), ALL_CASES, 'cases'),
    builds: list(values.builds, Object.keys(BUILDS), 'builds'),
    quick: q,
    kilnBin: values['kiln-bin'],
    keepScratch: values['keep-scratch'],
  };
  if (!Number.isInteger(o.runs) || o.runs < 1) throw new Error('--runs must be a positive integer');
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
  o.out = resolve(values.out ?? join(here, 'results', `load-${stamp}.json`));
  o.waterfallDir = resolve(values['waterfall-dir'] ?? (q ? dirname(o.out) : join(repo, 'docs/images')));
  o.waterfalls = (values.waterfalls ?? 'slow4g:cold,slow4g:library').split(',').map((s) => s.trim().split(':'));
  o.waterfallDirGiven = values['waterfall-dir'] !== undefined;
  o.waterfallsGiven = values.waterfalls !== undefined;
  o.from = values.from ? resolve(values.from) : null;
  return o;
}

// ---------------------------------------------------------------------------------- builds

function ensureSampleVendor() {
  const dir = BUILDS.sample.dir;
  if (existsSync(join(dir, 'vendor')) && existsSync(join(dir, 'node_modules'))) {
    // Up to date with copy-engine.mjs (it may have learned new files since the last install).
    const r = spawnSync(process.execPath, ['copy-engine.mjs'], { cwd: dir, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`examples/sample-game/copy-engine.mjs failed:\n${r.stdout}${r.stderr}`);
    return;
  }
  console.log('examples/sample-game has no vendor/: running npm install there (copies three.js from npm)');
  const r = spawnSync('npm', ['install', '--no-audit', '--no-fund'], { cwd: dir, stdio: 'inherit' });
  if (r.status !== 0 || !existsSync(join(dir, 'vendor'))) throw new Error('npm install in examples/sample-game failed');
}

function gitState() {
  const git = (...a) => spawnSync('git', a, { cwd: repo, encoding: 'utf8' }).stdout?.trim() ?? '';
  return { head: git('rev-parse', 'HEAD'), dirty: git('status', '--porcelain', '--', 'api', 'worker', 'common', 'examples').split('\n').filter(Boolean) };
}

/** Copies a build folder without developer files (dotfiles, npm files). */
function stageCopy(from, to) {
  cpSync(from, to, {
    recursive: true,
    filter: (src) => {
      const name = src.split('/').pop();
      if (src === from) return true;
      return !name.startsWith('.') && !SKIPPED.includes(name);
    },
  });
}

/**
 * Stages every build: the game, its twin (another game on the same engine file, with its own
 * game code: game.js carries a different header, so its bytes and URL differ) and the host page.
 */
function stageBuilds(stage, builds, keys) {
  const staged = {};
  for (const b of builds) {
    const game = gameName(b);
    const twin = gameName(b, true);
    stageCopy(BUILDS[b].dir, join(stage, game));
    stageCopy(BUILDS[b].dir, join(stage, twin));
    const js = join(stage, twin, 'game.js');
    if (!existsSync(js)) throw new Error(`${BUILDS[b].dir} has no game.js to make its twin from`);
    writeFileSync(js, `// ${twin}: another game built on the same engine file (Kiln load benchmark)\n${readFileSync(js, 'utf8')}`);
    if (BUILDS[b].kilnToml) {
      for (const g of [game, twin]) writeFileSync(join(stage, g, 'kiln.toml'), BUILDS[b].kilnToml);
    }
    staged[b] = { game, twin };
  }
  mkdirSync(join(stage, HOST), { recursive: true });
  const host = readFileSync(join(here, 'builds/host/index.html'), 'utf8').replace(/\/\*KILN_KEYS\*\/\[\]\/\*END\*\//, JSON.stringify(keys));
  writeFileSync(join(stage, HOST, 'index.html'), host);
  return staged;
}

function engineSummary(report) {
  const e = report?.stages?.engines ?? {};
  return {
    engines: (e.engines ?? []).map((x) => ({ path: x.path, name: x.name, version: x.version, size: x.size, module: x.module })),
    pages: (e.pages ?? []).map((p) => ({ path: p.path, engines: p.engines ?? p.rewrite?.engines ?? [], deferred: p.deferred ?? p.rewrite?.deferred ?? 0 })),
    bytes_moved: e.bytes_moved ?? null,
    package_reduction: e.package_reduction ?? null,
    warnings: e.warnings ?? [],
  };
}

// ---------------------------------------------------------------------------------- runs

function gameFile(path, game) {
  return path.startsWith(`/raw/${game}/`) || path.startsWith(`/play/${game}/`) || path.startsWith('/cdn/') || path.startsWith('/sdk/') || path.startsWith('/v1/games/');
}

async function runCase(browser, { build, profileName, caseName, server, urls, game }) {
  const profile = PROFILES[profileName];
  const context = await newContext(browser, profile);
  const t0 = Date.now();
  const rec = { build, profile: profileName, case: caseName, server, ok: false, errors: [], warnings: [] };
  try {
    const { page, log } = await openPage(context, profile);
    const prep = [];
    // The unmeasured first step of a case, with the same throttling.
    if (caseName === 'library') prep.push(await visit(page, log, urls.twin, { phase: 'prep', settle: false }));
    if (caseName === 'prewarm') prep.push(await visit(page, log, urls.host, { phase: 'prep', until: 'ready' }));
    if (caseName === 'repeat') prep.push(await visit(page, log, urls.game, { phase: 'prep', settle: false }));
    // Then until the first page's network is idle (the player's time between the two pages:
    // what the first page still fetches, e.g. Kiln's pre-warm of the game's files, completes).
    if (prep.length && !(await log.waitIdle())) rec.warnings.push('the network of the first step never went idle');
    for (const p of prep) {
      for (const e of p.errors) rec.errors.push(`first step (${p.url}): ${e}`);
      if (p.state !== 'ready') rec.errors.push(`first step (${p.url}) never got ready (state ${p.state})`);
    }
    if (caseName === 'prewarm') {
      const host = prep[0]?.host ?? null;
      rec.preheat = host ? { ms: host.ms, result: host.preheat ?? null, error: host.error ?? null } : null;
      if (host?.error) rec.warnings.push(`kiln.preheat rejected: ${host.error.reason}: ${host.error.message}`);
    }
    rec.prep = prep.map((p) => ({ url: p.url, firstFrame: p.firstFrame, totals: p.totals, wallMs: p.wallMs }));
    await applyProfile(log.cdp, profile); // (still applied; re-sent so nothing depends on it surviving a navigation)
    const m = await visit(page, log, urls.game, { phase: 'measured' });
    Object.assign(rec, {
      firstFrame: m.firstFrame,
      readyAt: m.readyAt,
      domContentLoaded: m.domContentLoaded,
      load: m.load,
      responseStart: m.responseStart,
      frames: m.frames,
      framesAfterReady1s: m.framesAfterReady1s,
      state: m.state,
      kiln: m.kiln,
      boot: m.boot,
      totals: m.totals,
      requests: m.requests,
    });
    rec.errors.push(...m.errors);
    if (m.firstFrame == null) rec.errors.push(`no first frame (state ${m.state})`);
    else if (!(m.rendered >= 2)) rec.errors.push(`the game stopped rendering after its first frame (${m.rendered} frames)`);
    for (const r of m.requests) {
      if (r.local) continue;
      const bad = r.failed ? `failed (${r.errorText})` : r.status >= 400 ? `HTTP ${r.status}` : null;
      if (!bad) continue;
      if (gameFile(r.path, game)) rec.errors.push(`game request ${r.path} ${bad}`);
      else rec.warnings.push(`request ${r.path} ${bad}`);
    }
    if (!m.requests.length) rec.errors.push('no requests captured');
    rec.ok = rec.errors.length === 0;
  } catch (e) {
    rec.errors.push(`run: ${e.stack || e.message}`);
  } finally {
    rec.wallMs = Date.now() - t0;
    await context.close().catch(() => {});
  }
  return rec;
}

// ---------------------------------------------------------------------------------- output

function fmtMs(x) {
  return x == null ? '-' : String(Math.round(x));
}

function group(runs, build, profile, kase, server) {
  return runs.filter((r) => r.build === build && r.profile === profile && r.case === kase && r.server === server);
}

function summarize(runs, o) {
  const rows = [];
  for (const build of o.builds) {
    for (const profile of o.profiles) {
      for (const kase of o.cases) {
        const side = (server) => {
          const all = group(runs, build, profile, kase, server);
          const ok = all.filter((r) => r.ok);
          const ff = ok.map((r) => r.firstFrame);
          return {
            n: all.length,
            ok: ok.length,
            firstFrame: ff,
            median: median(ff),
            p90: quantile(ff, 0.9),
            bytes: median(ok.map((r) => r.totals.transferred)),
            requests: median(ok.map((r) => r.totals.requests)),
            fromCache: median(ok.map((r) => r.totals.fromCache)),
            dcl: median(ok.map((r) => r.domContentLoaded)),
            load: median(ok.map((r) => r.load)),
            frames: median(ok.map((r) => r.frames)),
          };
        };
        const raw = side('raw');
        const kiln = side('kiln');
        rows.push({ build, profile, case: kase, raw, kiln, ratio: bootstrapRatio(raw.firstFrame, kiln.firstFrame, { n: 5000, seed: 13 }) });
      }
    }
  }
  return rows;
}

function printTables(rows, o) {
  const lines = [];
  for (const build of o.builds) {
    for (const profile of o.profiles) {
      const p = PROFILES[profile];
      lines.push('');
      lines.push(
        `${build} — ${profile} (${p.label}: ${p.latency} ms, ${p.down / 1e6}/${p.up / 1e6} Mbit/s, CPU ${p.cpu}×, ${p.viewport.width}×${p.viewport.height}) — time to first frame, ms`,
      );
      const head = ['case', 'raw median', 'raw p90', 'kiln median', 'kiln p90', 'kiln/raw [95% CI]', 'bytes raw → kiln', 'requests raw / kiln', 'ok runs raw / kiln'];
      const body = rows
        .filter((r) => r.build === build && r.profile === profile)
        .map((r) => [
          r.case,
          fmtMs(r.raw.median),
          fmtMs(r.raw.p90),
          fmtMs(r.kiln.median),
          fmtMs(r.kiln.p90),
          r.ratio ? `${r.ratio.ratio.toFixed(2)} [${r.ratio.lo.toFixed(2)}, ${r.ratio.hi.toFixed(2)}]` : '-',
          `${human(r.raw.bytes)} → ${human(r.kiln.bytes)}`,
          `${r.raw.requests ?? '-'} / ${r.kiln.requests ?? '-'}`,
          `${r.raw.ok}/${r.raw.n} / ${r.kiln.ok}/${r.kiln.n}`,
        ]);
      const width = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
      const line = (cells) => `| ${cells.map((c, i) => (i === 0 ? c.padEnd(width[i]) : c.padStart(width[i]))).join(' | ')} |`;
      lines.push(line(head));
      lines.push(`|${width.map((w, i) => (i === 0 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`);
      for (const b of body) lines.push(line(b));
    }
  }
  console.log(lines.join('\n'));
  return lines.join('\n');
}

/** The ok run whose first frame is the (lower) median of its group. */
function medianRun(runs) {
  const ok = runs.filter((r) => r.ok).sort((a, b) => a.firstFrame - b.firstFrame);
  return ok.length ? ok[Math.floor((ok.length - 1) / 2)] : null;
}

/** Tables, the text waterfall of the median cold slow4g runs, and the SVG waterfalls. */
function report(runs, o) {
  const rows = summarize(runs, o);
  console.log(`\n== load bench results (kiln/raw < 1: Kiln starts sooner; interval: 95 % bootstrap of the ratio of medians) ==`);
  const table = printTables(rows, o);
  // Text waterfall of the median cold slow4g run, and SVG waterfalls of the chosen cases.
  mkdirSync(o.waterfallDir, { recursive: true });
  const svgs = [];
  for (const b of o.builds) {
    if (o.profiles.includes('slow4g') && o.cases.includes('cold')) {
      for (const server of ['raw', 'kiln']) {
        const m = medianRun(group(runs, b, 'slow4g', 'cold', server));
        if (!m) continue;
        console.log(`\n${b} slow4g cold, ${server}: median run (#${m.run + 1}), ms since navigation start`);
        console.log(waterfallText(m));
      }
    }
    for (const [profile, kase] of o.waterfalls) {
      if (!o.profiles.includes(profile) || !o.cases.includes(kase)) continue;
      const panels = ['raw', 'kiln']
        .map((server) => ({ server, run: medianRun(group(runs, b, profile, kase, server)) }))
        .filter((p) => p.run)
        .map((p) => ({ label: `${p.server === 'raw' ? 'raw (nginx)' : 'Kiln'}: median run #${p.run.run + 1}`, run: p.run }));
      if (!panels.length) continue;
      const p = PROFILES[profile];
      const file = join(o.waterfallDir, `load-waterfall-${b}-${profile}-${kase}.svg`);
      writeFileSync(
        file,
        waterfallSvg({
          title: `${BUILDS[b].label}: ${kase} load, ${profile}`,
          subtitle: `${p.label}: ${p.latency} ms latency, ${p.down / 1e6} Mbit/s down, CPU ${p.cpu}×; headless Chromium; median of ${o.runs} runs by first frame; time since navigation start`,
          panels,
        }),
      );
      svgs.push(file);
    }
  }
  if (svgs.length) console.log(`\nwaterfalls: ${svgs.map((f) => relative(process.cwd(), f)).join(', ')}`);
  return { rows, table };
}

/** --from FILE: the report again from a results file, without running anything. */
function redraw(file, o) {
  const data = JSON.parse(readFileSync(file, 'utf8'));
  const saved = data.meta.options;
  const opts = { ...saved, waterfallDir: o.waterfallDirGiven ? o.waterfallDir : saved.waterfallDir, waterfalls: o.waterfallsGiven ? o.waterfalls : saved.waterfalls };
  for (const r of data.runs) {
    for (const q of r.requests ?? []) {
      // (files written before the memory-cache first-byte fix)
      if (q.response != null && q.start != null && (q.response < q.start || (q.end != null && q.response > q.end))) q.response = q.start;
    }
  }
  report(data.runs, opts);
  const errors = data.runs.filter((r) => !r.ok);
  console.log(`load bench (from ${relative(process.cwd(), file)}): ${data.runs.length} runs, ${errors.length} errors`);
  process.exitCode = errors.length || !data.runs.length ? 1 : 0;
}

// ---------------------------------------------------------------------------------- main

async function main() {
  const o = options();
  if (o.from) return redraw(o.from, o);
  const started = Date.now();
  const startLoad = loadavg();
  const kilnBin = findKiln(repo, o.kilnBin);
  const scratch = mkdtempSync(join(tmpdir(), 'kiln-load-bench-'));
  // nginx's workers (an unprivileged user when we run as root) must get through to stage/.
  chmodSync(scratch, 0o711);
  const stage = join(scratch, 'stage');
  mkdirSync(stage, { mode: 0o755 });
  let kiln = null;
  let nginx = null;
  let browser = null;
  let failed = true;
  const stop = async () => {
    await browser?.close().catch(() => {});
    await kiln?.stop().catch(() => {});
    await nginx?.stop().catch(() => {});
  };
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.once(sig, () => {
      console.error(`\n${sig}: stopping Kiln, nginx and Chromium (scratch kept: ${scratch})`);
      stop().finally(() => {
        killAll('SIGTERM');
        process.exit(130);
      });
    });
  }
  try {
    console.log(`load bench: kiln-api ${relative(repo, kilnBin) || kilnBin} (built ${statSync(kilnBin).mtime.toISOString()}), scratch ${scratch}`);
    if (o.builds.includes('sample')) ensureSampleVendor();
    if (o.builds.some((b) => b !== 'sample')) prepare({ quiet: true });

    kiln = new Kiln({ bin: kilnBin, dir: join(scratch, 'kiln') });
    await kiln.start();
    console.log(`kiln: ${kiln.base}, games on ${kiln.content} (log ${kiln.logFile})`);
    await kiln.team();
    const keys = await kiln.keys();
    const staged = stageBuilds(stage, o.builds, keys);

    // Upload every build as a team's CI would, and wait until each is published.
    const version = `bench-${Date.now()}`;
    const buildInfo = {};
    const uploads = [[HOST, null], ...o.builds.flatMap((b) => [[staged[b].game, b], [staged[b].twin, b]])];
    const t0 = Date.now();
    const pending = [];
    for (const [game, b] of uploads) {
      const zip = zipDir(join(stage, game));
      pending.push({ game, b, zip: zip.length, up: await kiln.upload(game, version, zip) });
    }
    for (const { game, b, zip, up } of pending) {
      const res = await kiln.published(game, up);
      const eng = engineSummary(res.report);
      buildInfo[game] = { build: b, build_id: res.build, zip_bytes: zip, engines_report: res.report?.stages?.engines ?? null, ...eng };
      const names = eng.engines.map((e) => `${e.name} ${e.version} (${e.path}, ${human(e.size)})`).join(', ') || 'no engine';
      const pages = eng.pages.filter((p) => p.engines.length).map((p) => `${p.path} (${p.deferred} scripts deferred)`).join(', ') || '-';
      console.log(`  ${game}: published; engines: ${names}; pages rewritten: ${pages}${eng.warnings.length ? `; warnings: ${eng.warnings.join(' | ')}` : ''}`);
      if (b) {
        const want = BUILDS[b].engine;
        if (!eng.engines.some((e) => e.name === want)) {
          throw new Error(`Kiln's build report of ${game} does not list ${want} as an engine: ${JSON.stringify(eng)}`);
        }
      }
    }
    console.log(`  ${uploads.length} builds published in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

    nginx = new Nginx({ dir: join(scratch, 'nginx'), root: stage, probe: `${HOST}/index.html` });
    await nginx.start();
    console.log(`nginx: ${nginx.base}/raw/ (config ${join(scratch, 'nginx', 'nginx.conf')})`);

    const urlsFor = (server, b) => {
      const { game, twin } = staged[b];
      if (server === 'raw') {
        return { game: `${nginx.base}/raw/${game}/`, twin: `${nginx.base}/raw/${twin}/`, host: `${nginx.base}/raw/${HOST}/?game=${game}&mode=raw` };
      }
      return { game: `${kiln.content}/play/${game}/`, twin: `${kiln.content}/play/${twin}/`, host: `${kiln.content}/play/${HOST}/?game=${game}&mode=kiln` };
    };

    browser = await launchChromium();
    const total = o.builds.length * o.profiles.length * o.cases.length * 2 * o.runs;
    console.log(`chromium ${browser.version()}; ${total} measured loads (${o.builds.join(',')} × ${o.profiles.join(',')} × ${o.cases.join(',')} × raw,kiln × ${o.runs})`);

    const runs = [];
    let n = 0;
    for (const b of o.builds) {
      for (const profileName of o.profiles) {
        for (let i = 0; i < o.runs; i++) {
          for (const [ci, caseName] of o.cases.entries()) {
            const order = (i + ci) % 2 === 0 ? ['raw', 'kiln'] : ['kiln', 'raw'];
            for (const [k, server] of order.entries()) {
              const rec = await runCase(browser, { build: b, profileName, caseName, server, urls: urlsFor(server, b), game: staged[b].game });
              rec.run = i;
              rec.order = k;
              runs.push(rec);
              n++;
              const t = rec.totals;
              const engine = [
                ...(rec.kiln ?? []).filter((e) => e.type === 'preheat').map((e) => `${e.outcome}${e.reason ? `/${e.reason}` : ''}`),
                ...(rec.boot ?? []).map((s) => s.state),
              ];
              const what = rec.ok
                ? `first frame ${fmtMs(rec.firstFrame)} ms, ${t.requests} req, ${human(t.transferred)}${engine.length ? `, engine ${engine.join(',')}` : ''}`
                : `ERROR ${rec.errors.slice(0, 3).join('; ')}`;
              console.log(`  [${n}/${total}] ${b} ${profileName} #${i + 1} ${caseName.padEnd(7)} ${server.padEnd(4)} ${what}${rec.warnings.length ? ` (warning: ${rec.warnings[0]})` : ''}`);
            }
          }
        }
      }
    }

    const { rows, table } = report(runs, o);

    const errors = runs.filter((r) => !r.ok);
    const result = {
      meta: {
        date: new Date().toISOString(),
        wall_s: Math.round((Date.now() - started) / 1000),
        options: { ...o, out: undefined },
        kiln_bin: kilnBin,
        kiln_bin_mtime: statSync(kilnBin).mtime.toISOString(),
        git: gitState(),
        chromium: browser.version(),
        node: process.version,
        cpus: cpus().length,
        loadavg_start: startLoad,
        loadavg_end: loadavg(),
        profiles: Object.fromEntries(o.profiles.map((p) => [p, PROFILES[p]])),
        first_frame:
          'performance.now() at the first requestAnimationFrame callback that starts after document.body.dataset.state became "ready" (ms since navigation start)',
      },
      builds: buildInfo,
      summary: rows.map((r) => ({ ...r, raw: { ...r.raw, firstFrame: undefined }, kiln: { ...r.kiln, firstFrame: undefined } })),
      table,
      runs,
    };
    mkdirSync(dirname(o.out), { recursive: true });
    writeFileSync(o.out, `${JSON.stringify(result, null, 1)}\n`);
    console.log(`results: ${relative(process.cwd(), o.out) || o.out}`);
    for (const r of errors.slice(0, 20)) console.log(`  error: ${r.build} ${r.profile} ${r.case} ${r.server} #${r.run + 1}: ${r.errors.join('; ')}`);
    console.log(`load bench: ${runs.length} runs, ${errors.length} errors, ${Math.round((Date.now() - started) / 1000)} s`);
    failed = errors.length > 0 || runs.length === 0;
  } finally {
    await stop();
    if (!failed && !o.keepScratch) rmSync(scratch, { recursive: true, force: true });
    else console.log(`scratch kept: ${scratch}`);
  }
  process.exitCode = failed ? 1 : 0;
}

main().catch((e) => {
  console.error(`load bench failed: ${e.stack || e.message}`);
  killAll('SIGTERM');
  process.exitCode = 1;
});
