// The benchmark games' assets, drawn by code (our own work, CC0): a sprite atlas, a
// background and a level file. Deterministic for a given seed, so every run ships the same bytes.
import { encodePng } from './png.mjs';

export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function hsl(h, s, l) {
  const f = (n) => {
    const k = (n + h * 12) % 12;
    const a = s * Math.min(l, 1 - l);
    return l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1));
  };
  return [f(0) * 255, f(8) * 255, f(4) * 255];
}

/** A `cols × rows` atlas of `size`-pixel frames (gems, stars, rings), plus its JSON (hash format). */
export function atlas({ seed, cols = 8, rows = 4, size = 64, image = 'atlas.png' }) {
  const rand = rng(seed);
  const w = cols * size;
  const h = rows * size;
  const px = new Uint8Array(w * h * 4);
  const frames = {};
  for (let j = 0; j < rows; j++) {
    for (let i = 0; i < cols; i++) {
      const n = j * cols + i;
      const hue = rand();
      const kind = n % 3; // 0 gem, 1 star, 2 ring
      const spikes = 5 + Math.floor(rand() * 4);
      const r0 = size * (0.3 + rand() * 0.15);
      for (let y = 0; y < size; y++) {
        for (let x = 0; x < size; x++) {
          const dx = x + 0.5 - size / 2;
          const dy = y + 0.5 - size / 2;
          const d = Math.hypot(dx, dy);
          const a = Math.atan2(dy, dx);
          let edge;
          if (kind === 0) edge = r0 * (1 + 0.12 * Math.cos(6 * a));
          else if (kind === 1) edge = r0 * (0.65 + 0.45 * Math.abs(Math.cos((spikes / 2) * a)));
          else edge = d < r0 * 0.55 ? -1 : r0 * 1.1;
          const inside = edge - d;
          const o = ((j * size + y) * w + i * size + x) * 4;
          if (inside <= 0) continue;
          const shade = 0.35 + 0.4 * (1 - d / (size / 2)) + 0.15 * Math.sin(a * 3 + hue * 6);
          const [r, g, b] = hsl(hue, 0.75, Math.max(0.1, Math.min(0.9, shade)));
          const grain = (rand() - 0.5) * 18;
          px[o] = Math.max(0, Math.min(255, r + grain));
          px[o + 1] = Math.max(0, Math.min(255, g + grain));
          px[o + 2] = Math.max(0, Math.min(255, b + grain));
          px[o + 3] = Math.round(255 * Math.min(1, inside / 1.5));
        }
      }
      frames[`sprite${String(n).padStart(2, '0')}`] = {
        frame: { x: i * size, y: j * size, w: size, h: size },
        rotated: false,
        trimmed: false,
        spriteSourceSize: { x: 0, y: 0, w: size, h: size },
        sourceSize: { w: size, h: size },
      };
    }
  }
  const json = { frames, meta: { app: 'kiln load bench', image, format: 'RGBA8888', size: { w, h }, scale: '1' } };
  return { png: encodePng(w, h, px), json: JSON.stringify(json, null, 1) };
}

/** A sky-and-hills background with some grain (so it weighs what a real one does). */
export function background({ seed, width = 512, height = 1024, grain = 8, block = 4 }) {
  const rand = rng(seed);
  const bw = Math.ceil(width / block);
  const noise = Float32Array.from({ length: bw * Math.ceil(height / block) }, () => (rand() - 0.5) * grain);
  const px = new Uint8Array(width * height * 4);
  const hills = [0, 1, 2].map(() => ({ f: 2 + rand() * 4, p: rand() * 6.28, base: 0.55 + rand() * 0.3 }));
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const u = x / width;
      const v = y / height;
      let [r, g, b] = hsl(0.58, 0.6, 0.75 - 0.35 * v);
      hills.forEach((hill, k) => {
        const top = hill.base + 0.05 * Math.sin(u * hill.f * 6.28 + hill.p);
        if (v > top) [r, g, b] = hsl(0.28 + 0.04 * k, 0.55, 0.45 - 0.1 * k + 0.1 * (v - top));
      });
      const n = noise[Math.floor(y / block) * bw + Math.floor(x / block)];
      const o = (y * width + x) * 4;
      px[o] = Math.max(0, Math.min(255, r + n));
      px[o + 1] = Math.max(0, Math.min(255, g + n));
      px[o + 2] = Math.max(0, Math.min(255, b + n));
      px[o + 3] = 255;
    }
  }
  return encodePng(width, height, px);
}

/** Where the game places its sprites: plain JSON the game loads before it starts. */
export function level({ seed, count = 120, frames = 32, width = 412, height = 823 }) {
  const rand = rng(seed);
  const sprites = [];
  for (let i = 0; i < count; i++) {
    sprites.push({
      frame: `sprite${String(Math.floor(rand() * frames)).padStart(2, '0')}`,
      x: Math.round(rand() * width),
      y: Math.round(rand() * height),
      vx: Math.round((rand() - 0.5) * 200),
      vy: Math.round((rand() - 0.5) * 200),
      spin: Math.round((rand() - 0.5) * 400) / 100,
    });
  }
  return JSON.stringify({ name: `level-${seed}`, width, height, sprites }, null, 1);
}
