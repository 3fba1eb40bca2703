// Kiln dashboard charts: small hand-written SVG charts, no dependencies, no network.
//
//   KilnCharts.line(el, {series: [{name, color, dash, width, points: [{x: ms, y, title}]}],
//                        x0, x1, yMax, yFormat, yTickFormat, yLabel, integer, gapMs, height})
//   KilnCharts.bars(el, {items: [{label, value, color, title}] | [{label, values: [{name, value, color}]}],
//                        format, tickFormat, xLabel, integer, legend: [{name, color}]})
//
// Each call replaces el's content: an <svg> (every drawn bar or line has class "mark") and,
// where there are series, an HTML legend; with nothing to draw, a "no data" placeholder.
// Times are epoch milliseconds, shown in UTC (the server buckets by UTC hour).
(() => {
  'use strict';
  const NS = 'http://www.w3.org/2000/svg';
  const HOUR = 3600e3;
  const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  const finite = (v) => typeof v === 'number' && Number.isFinite(v);

  function svgEl(tag, attrs, parent) {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }
  function label(parent, x, y, str, attrs) {
    const t = svgEl('text', { x, y, ...attrs }, parent);
    t.textContent = str;
    return t;
  }
  function tooltip(el, str) {
    if (str) svgEl('title', {}, el).textContent = str;
  }
  function placeholder(el, message, height) {
    const div = document.createElement('div');
    div.className = 'empty';
    div.style.minHeight = `${height}px`;
    div.textContent = message || 'No data in this range';
    el.replaceChildren(div);
  }
  function frame(el, height) {
    const width = Math.max(320, Math.floor(el.clientWidth || 640));
    const svg = svgEl('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img' });
    el.replaceChildren(svg);
    return { svg, width };
  }
  // 0 .. a round maximum, in about `count` round steps.
  function niceTicks(max, count, integer) {
    if (!(max > 0)) max = integer ? count : 1;
    const raw = max / count;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const steps = integer ? [1, 2, 5, 10] : [1, 2, 2.5, 5, 10];
    let step = steps.find((s) => raw <= s * mag) * mag;
    if (integer) step = Math.max(1, Math.round(step));
    const top = Math.ceil(max / step - 1e-9) * step;
    const ticks = [];
    for (let i = 0; i * step <= top + step / 2; i++) ticks.push(Number((i * step).toPrecision(12)));
    return { ticks, max: top };
  }
  const pad2 = (n) => String(n).padStart(2, '0');
  function timeText(t) {
    const d = new Date(t);
    return `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]} ${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())} UTC`;
  }
  function timeTicks(x0, x1, maxTicks) {
    const steps = [0.25, 0.5, 1, 2, 3, 6, 12, 24, 48, 96, 168, 336].map((h) => h * HOUR);
    const step = steps.find((s) => (x1 - x0) / s <= maxTicks) || 672 * HOUR;
    const ticks = [];
    for (let t = Math.ceil(x0 / step) * step; t <= x1; t += step) ticks.push(t);
    return ticks.map((t, i) => {
      const d = new Date(t);
      const day = `${d.getUTCDate()} ${MONTHS[d.getUTCMonth()]}`;
      if (step >= 24 * HOUR) return { t, lines: [day] };
      const hm = `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}`;
      return { t, lines: i === 0 || (d.getUTCHours() === 0 && d.getUTCMinutes() === 0) ? [hm, day] : [hm] };
    });
  }

  function legend(el, entries, onToggle) {
    const box = document.createElement('div');
    box.className = 'legend';
    for (const e of entries) {
      const item = document.createElement(onToggle ? 'button' : 'span');
      item.className = `legend-item${e.off ? ' off' : ''}`;
      if (onToggle) {
        item.type = 'button';
        item.title = e.off ? `Show ${e.name}` : `Hide ${e.name}`;
        item.addEventListener('click', () => onToggle(e.name));
      }
      const sw = document.createElement('span');
      sw.className = `swatch${e.line ? ' line' : ''}`;
      if (e.line) {
        sw.style.borderTopColor = e.color;
        sw.style.borderTopStyle = e.dash ? (e.dash.startsWith('1 ') ? 'dotted' : 'dashed') : 'solid';
      } else sw.style.background = e.color;
      item.append(sw, document.createTextNode(e.name));
      box.appendChild(item);
    }
    el.appendChild(box);
  }

  function line(el, opts) {
    const o = { height: 260, gapMs: 1.5 * HOUR, yFormat: String, ...opts };
    const tickFmt = o.yTickFormat || o.yFormat;
    const hidden = el.kilnHidden || (el.kilnHidden = new Set());
    const all = (o.series || []).map((s) => ({ ...s, points: (s.points || []).filter((p) => finite(p.x)).sort((a, b) => a.x - b.x) }))
      .filter((s) => s.points.some((p) => finite(p.y)));
    if (!all.length) return placeholder(el, o.empty, o.height);
    const shown = all.filter((s) => !hidden.has(s.name)).map((s) => ({ ...s, byX: new Map(s.points.map((p) => [p.x, p])) }));
    const { svg, width } = frame(el, o.height);
    const m = { l: 58, r: 18, t: 22, b: 42 };
    const xs = all.flatMap((s) => s.points.map((p) => p.x));
    const x0 = Math.min(finite(o.x0) ? o.x0 : Infinity, ...xs);
    let x1 = Math.max(finite(o.x1) ? o.x1 : -Infinity, ...xs);
    if (x1 <= x0) x1 = x0 + HOUR;
    const ys = shown.flatMap((s) => s.points.map((p) => p.y)).filter(finite);
    const { ticks, max } = niceTicks(finite(o.yMax) ? o.yMax : Math.max(0, ...ys) * 1.05, 5, o.integer);
    const pw = width - m.l - m.r;
    const ph = o.height - m.t - m.b;
    const X = (x) => m.l + ((x - x0) / (x1 - x0)) * pw;
    const Y = (y) => m.t + ph - (Math.min(y, max) / max) * ph;

    const axes = svgEl('g', { class: 'axes' }, svg);
    for (const v of ticks) {
      svgEl('line', { class: v === 0 ? 'axis' : 'gridline', x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v) }, axes);
      label(axes, m.l - 8, Y(v) + 4, tickFmt(v), { class: 'tick', 'text-anchor': 'end' });
    }
    for (const { t, lines } of timeTicks(x0, x1, Math.max(2, Math.floor(pw / 90)))) {
      svgEl('line', { class: 'tick-mark', x1: X(t), x2: X(t), y1: m.t + ph, y2: m.t + ph + 5 }, axes);
      lines.forEach((str, i) => label(axes, X(t), m.t + ph + 18 + i * 13, str, { class: `tick${i ? ' sub' : ''}`, 'text-anchor': 'middle' }));
    }
    if (o.yLabel) label(axes, m.l - 50, 13, o.yLabel, { class: 'axis-label' });
    label(axes, width - m.r, o.height - 4, 'UTC', { class: 'axis-label', 'text-anchor': 'end' });

    // One transparent column per x value: hovering it lists every series' value there.
    const hover = svgEl('g', { class: 'hover' }, svg);
    const cols = [...new Set(shown.flatMap((s) => s.points.filter((p) => finite(p.y)).map((p) => p.x)))].sort((a, b) => a - b);
    cols.forEach((x, i) => {
      const left = i ? (X(cols[i - 1]) + X(x)) / 2 : m.l;
      const right = i < cols.length - 1 ? (X(x) + X(cols[i + 1])) / 2 : width - m.r;
      const rows = shown.map((s) => [s.name, s.byX.get(x)]).filter(([, p]) => p && finite(p.y));
      const col = svgEl('rect', { x: left, y: m.t, width: Math.max(1, right - left), height: ph }, hover);
      tooltip(col, [timeText(x), ...rows.map(([n, p]) => `${n}: ${p.title || o.yFormat(p.y)}`)].join('\n'));
    });

    const plot = svgEl('g', { class: 'series' }, svg);
    for (const s of shown) {
      let d = '';
      let prev = null;
      const singles = [];
      s.points.forEach((p, i) => {
        if (!finite(p.y)) { prev = null; return; }
        const joined = prev && p.x - prev.x <= o.gapMs;
        d += `${joined ? 'L' : 'M'}${X(p.x).toFixed(1)},${Y(p.y).toFixed(1)}`;
        const next = s.points[i + 1];
        if (!joined && !(next && finite(next.y) && next.x - p.x <= o.gapMs)) singles.push(p);
        prev = p;
      });
      const path = svgEl('path', { class: 'mark line', d, stroke: s.color, 'stroke-width': s.width || 2, 'stroke-dasharray': s.dash, fill: 'none' }, plot);
      tooltip(path, s.name);
      const dots = s.points.length <= 48 ? s.points.filter((p) => finite(p.y)) : singles;
      for (const p of dots) {
        const c = svgEl('circle', { class: 'dot', cx: X(p.x), cy: Y(p.y), r: 2.8, fill: s.color }, plot);
        tooltip(c, `${s.name}, ${timeText(p.x)}: ${p.title || o.yFormat(p.y)}`);
      }
    }
    legend(el, all.map((s) => ({ name: s.name, color: s.color, dash: s.dash, line: true, off: hidden.has(s.name) })), (name) => {
      if (hidden.has(name)) hidden.delete(name); else hidden.add(name);
      line(el, opts);
    });
  }

  function bars(el, opts) {
    const o = { format: String, rowHeight: 26, ...opts };
    const tickFmt = o.tickFormat || o.format;
    const items = (o.items || []).map((it) => ({
      ...it,
      values: (it.values || [{ name: it.label, value: it.value, color: it.color, title: it.title }]).filter((v) => finite(v.value) && v.value >= 0),
    }));
    const total = (it) => it.values.reduce((a, v) => a + v.value, 0);
    if (!items.some((it) => it.values.length)) return placeholder(el, o.empty, 120);
    const m = { l: 0, r: 64, t: 8, b: o.xLabel ? 40 : 26 };
    const chars = Math.max(...items.map((it) => String(it.label).length));
    m.l = Math.min(230, 16 + chars * 7);
    const height = m.t + items.length * o.rowHeight + m.b;
    const { svg, width } = frame(el, height);
    const { ticks, max } = niceTicks(Math.max(...items.map(total)), Math.max(2, Math.floor((width - m.l - m.r) / 110)), o.integer);
    const X = (v) => m.l + (v / max) * (width - m.l - m.r);
    const axes = svgEl('g', { class: 'axes' }, svg);
    for (const v of ticks) {
      svgEl('line', { class: v === 0 ? 'axis' : 'gridline', x1: X(v), x2: X(v), y1: m.t, y2: height - m.b }, axes);
      label(axes, X(v), height - m.b + 16, tickFmt(v), { class: 'tick', 'text-anchor': 'middle' });
    }
    if (o.xLabel) label(axes, width - m.r, height - 4, o.xLabel, { class: 'axis-label', 'text-anchor': 'end' });
    const plot = svgEl('g', { class: 'bars' }, svg);
    items.forEach((it, i) => {
      const y = m.t + i * o.rowHeight;
      label(plot, m.l - 8, y + o.rowHeight / 2 + 4, String(it.label), { class: 'bar-label', 'text-anchor': 'end' });
      let acc = 0;
      for (const v of it.values.filter((x) => x.value > 0)) {
        const r = svgEl('rect', {
          class: 'mark bar', x: X(acc), y: y + o.rowHeight * 0.18, height: o.rowHeight * 0.64,
          width: Math.max(1, X(acc + v.value) - X(acc)), fill: v.color || o.color || '#4e79a7',
        }, plot);
        tooltip(r, v.title || `${it.label}${it.values.length > 1 || o.legend ? ` · ${v.name}` : ''}: ${o.format(v.value)}`);
        acc += v.value;
      }
      label(plot, X(acc) + 6, y + o.rowHeight / 2 + 4, it.values.length ? o.format(it.total ?? acc) : '–', { class: 'bar-value' });
    });
    if (o.legend) legend(el, o.legend);
  }

  window.KilnCharts = { line, bars, niceTicks, timeText, HOUR };
})();
