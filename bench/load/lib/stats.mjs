// Medians, percentiles and a seeded bootstrap of the ratio of medians.
import { rng } from './assets.mjs';

export function quantile(values, q) {
  const v = values.filter((x) => x != null && Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return null;
  const pos = (v.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}
export const median = (v) => quantile(v, 0.5);

/**
 * 95 % percentile bootstrap interval of median(b) / median(a): each side resampled with
 * replacement on its own, `n` resamples, fixed seed (the same data give the same interval).
 */
export function bootstrapRatio(a, b, { n = 5000, seed = 13, level = 0.95 } = {}) {
  a = a.filter(Number.isFinite);
  b = b.filter(Number.isFinite);
  if (!a.length || !b.length) return null;
  const rand = rng(seed);
  const ratios = new Float64Array(n);
  const sa = new Float64Array(a.length);
  const sb = new Float64Array(b.length);
  const med = (s) => {
    s.sort();
    const m = (s.length - 1) / 2;
    return (s[Math.floor(m)] + s[Math.ceil(m)]) / 2;
  };
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < a.length; j++) sa[j] = a[Math.floor(rand() * a.length)];
    for (let j = 0; j < b.length; j++) sb[j] = b[Math.floor(rand() * b.length)];
    ratios[i] = med(sb) / med(sa);
  }
  ratios.sort();
  const lo = ratios[Math.floor(((1 - level) / 2) * (n - 1))];
  const hi = ratios[Math.ceil((1 - (1 - level) / 2) * (n - 1))];
  return { ratio: median(b) / median(a), lo, hi, resamples: n, seed };
}
