// Request waterfalls of a measured page load: SVG (raw and Kiln stacked on one time axis) and text.

const COLORS = {
  Document: '#4e79a7',
  Script: '#f28e2b',
  Stylesheet: '#b07aa1',
  Image: '#59a14f',
  Fetch: '#76b7b2',
  XHR: '#76b7b2',
  Ping: '#bab0ac',
  Other: '#9c755f',
};

export function human(bytes) {
  if (bytes == null) return '-';
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1e6) return `${(bytes / 1000).toFixed(1)} kB`;
  return `${(bytes / 1e6).toFixed(2)} MB`;
}

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

function niceStep(span) {
  const raw = span / 8;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function shortPath(path, max = 46) {
  const p = path
    .replace(/^\/(play|raw)\/[^/]+\//, './')
    .replace(/^\.\/@[0-9a-f-]{8,}\//, './@build/').replace(/^\/cdn\/library\/([0-9a-f]{8})[0-9a-f]+/, '/cdn/library/$1…');
  return p.length > max ? `${p.slice(0, 20)}…${p.slice(-(max - 21))}` : p;
}

function requestLabel(r) {
  const size = r.cache ? `(${r.cache} cache)` : r.local ? '(local)' : human(r.transferred);
  const status = r.status && r.status !== 200 ? ` ${r.status}` : '';
  const failed = r.failed ? ` FAILED ${r.errorText || ''}` : '';
  return `${shortPath(r.path)}${status} ${size}${failed}`;
}

/**
 * panels: [{ label, run }] where run = { requests, firstFrame, readyAt, domContentLoaded, load }.
 * Returns an SVG document.
 */
export function waterfallSvg({ title, subtitle = '', panels }) {
  const W = 1200;
  const left = 420;
  const right = 24;
  const row = 17;
  const plotW = W - left - right;
  const rows = (p) => p.run.requests.filter((r) => r.start != null);
  let tMax = 0;
  for (const p of panels) {
    for (const r of rows(p)) tMax = Math.max(tMax, r.end ?? r.start);
    tMax = Math.max(tMax, p.run.firstFrame ?? 0, p.run.load ?? 0);
  }
  tMax = Math.max(100, tMax * 1.04);
  const step = niceStep(tMax);
  const x = (t) => left + (Math.max(0, t) / tMax) * plotW;
  const out = [];
  let y = 58;
  const axis = (y0, y1) => {
    for (let t = 0; t <= tMax; t += step) {
      out.push(`<line x1="${x(t).toFixed(1)}" y1="${y0}" x2="${x(t).toFixed(1)}" y2="${y1}" stroke="#e3e3e3"/>`);
      out.push(`<text x="${x(t).toFixed(1)}" y="${y0 - 4}" font-size="10" text-anchor="middle" fill="#777">${t >= 1000 ? `${(t / 1000).toFixed(step < 1000 ? 1 : 0)} s` : `${t} ms`}</text>`);
    }
  };
  for (const p of panels) {
    const rs = rows(p).sort((a, b) => a.start - b.start);
    const top = y;
    out.push(`<text x="12" y="${y}" font-size="13" font-weight="bold">${esc(p.label)}</text>`);
    const ff = p.run.firstFrame;
    const engines = [
      ...(p.run.kiln || []).filter((e) => e.type === 'preheat').map((e) => `${e.engine} ${e.outcome}${e.reason ? `/${e.reason}` : ''}`),
      ...(p.run.boot || []).map((s) => s.state),
    ];
    const facts = [
      `${p.run.totals?.requests ?? rs.length} network requests, ${human(p.run.totals?.transferred)} transferred`,
      `first frame ${ff != null ? `${Math.round(ff)} ms` : 'none'}`,
      p.run.domContentLoaded != null ? `DOMContentLoaded ${Math.round(p.run.domContentLoaded)} ms` : null,
      engines.length ? `engine: ${engines.join(', ')}` : null,
    ].filter(Boolean);
    out.push(`<text x="${left}" y="${y}" font-size="11" fill="#555">${esc(facts.join('; '))}</text>`);
    y += 22;
    axis(y, y + rs.length * row + 4);
    y += 4;
    for (const r of rs) {
      const color = COLORS[r.type] || COLORS.Other;
      const end = r.end ?? r.response ?? r.start;
      const x0 = x(r.start);
      const xr = x(r.response ?? r.start);
      const x1 = Math.max(x(end), x0 + 1.5);
      const op = r.cache || r.local ? 0.35 : 1;
      out.push(`<text x="12" y="${y + 12}" font-size="11" font-family="monospace" fill="${r.failed ? '#c00' : '#222'}">${esc(requestLabel(r))}</text>`);
      // waiting (request sent → first byte) light, download (first byte → end) solid
      out.push(`<rect x="${x0.toFixed(1)}" y="${y + 3}" width="${Math.max(0, xr - x0).toFixed(1)}" height="${row - 6}" fill="${color}" opacity="${0.3 * op}"/>`);
      out.push(`<rect x="${xr.toFixed(1)}" y="${y + 3}" width="${Math.max(1.5, x1 - xr).toFixed(1)}" height="${row - 6}" fill="${color}" opacity="${op}"${r.failed ? ' stroke="#c00"' : ''}/>`);
      y += row;
    }
    const bottom = y + 2;
    const mark = (t, color, label, dash, dy) => {
      if (t == null) return;
      out.push(`<line x1="${x(t).toFixed(1)}" y1="${top + 8}" x2="${x(t).toFixed(1)}" y2="${bottom}" stroke="${color}" stroke-width="1.5"${dash ? ` stroke-dasharray="${dash}"` : ''}/>`);
      const flip = x(t) > W - 160; // near the right edge: the label goes left of the line
      out.push(`<text x="${(x(t) + (flip ? -3 : 3)).toFixed(1)}" y="${bottom - 4 - dy}" font-size="10" fill="${color}"${flip ? ' text-anchor="end"' : ''}>${esc(label)}</text>`);
    };
    mark(p.run.domContentLoaded, '#4e79a7', 'DOMContentLoaded', '2 3', 24);
    mark(p.run.readyAt, '#e08a00', 'ready', '5 3', 12);
    mark(ff, '#d62728', `first frame ${ff != null ? Math.round(ff) : ''} ms`, null, 0);
    y = bottom + 30;
  }
  const legend = Object.entries({ document: COLORS.Document, stylesheet: COLORS.Stylesheet, script: COLORS.Script, image: COLORS.Image, 'fetch/XHR': COLORS.Fetch, other: COLORS.Other })
    .map(([k, c], i) => `<rect x="${left + i * 95}" y="${y - 12}" width="10" height="10" fill="${c}"/><text x="${left + i * 95 + 14}" y="${y - 3}" font-size="11">${k}</text>`)
    .join('');
  const note = `<text x="12" y="${y - 3}" font-size="10" fill="#666">light part: waiting for the first byte; faded bar: from cache</text>`;
  const H = y + 10;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif">
<rect width="${W}" height="${H}" fill="#fff"/>
<text x="12" y="22" font-size="16" font-weight="bold">${esc(title)}</text>
<text x="12" y="40" font-size="11" fill="#555">${esc(subtitle)}</text>
${out.join('\n')}
${legend}
${note}
</svg>
`;
}

/** The same as text: one line per request, bars scaled to `width` characters. */
export function waterfallText(run, { width = 50 } = {}) {
  const rs = run.requests.filter((r) => r.start != null).sort((a, b) => a.start - b.start);
  const tMax = Math.max(1, ...rs.map((r) => r.end ?? r.start), run.firstFrame ?? 0);
  const col = (t) => Math.min(width - 1, Math.round((Math.max(0, t) / tMax) * (width - 1)));
  const lines = rs.map((r) => {
    const a = col(r.start);
    const b = Math.max(a, col(r.end ?? r.start));
    const bar = Array.from({ length: width }, (_, i) => (i < a || i > b ? ' ' : r.cache || r.local ? '-' : '='));
    if (run.firstFrame != null) bar[col(run.firstFrame)] = '|';
    const t = `${String(Math.round(r.start)).padStart(6)}–${String(Math.round(r.end ?? r.start)).padEnd(6)}`;
    const size = (r.cache ? r.cache : r.local ? 'local' : human(r.transferred)).padStart(9);
    return `    ${t} ${size}  [${bar.join('')}] ${shortPath(r.path, 60)}${r.status && r.status !== 200 ? ` ${r.status}` : ''}${r.failed ? ' FAILED' : ''}`;
  });
  lines.push(`    first frame ${run.firstFrame != null ? `${Math.round(run.firstFrame)} ms` : 'none'} (|), ready ${run.readyAt != null ? `${Math.round(run.readyAt)} ms` : '-'}, DOMContentLoaded ${run.domContentLoaded != null ? `${Math.round(run.domContentLoaded)} ms` : '-'}`);
  return lines.join('\n');
}
