// A VAT decoder in GLSL ES 3.0 written from docs/vat.md and a vat.json alone: the same
// functions as the baker's vat.glsl (vatFrame, vatPosition, vatNormal and the
// vatPositions<i>/vatNormals<i> samplers), so that vat-render.mjs can tell a wrong
// vat.glsl (`--decoder chunk` fails, `--decoder spec` passes) from wrong textures
// (both fail). No imports: it runs in the browser page and in Node.

function glslFloat(x) {
  if (!Number.isFinite(x)) throw new Error(`not a finite number: ${x}`);
  const s = String(Math.fround(x) === x ? x : Number(x.toPrecision(9)));
  return /[.e]/.test(s) ? s : `${s}.0`;
}

function glslVec3(v) {
  return `vec3(${v.map(glslFloat).join(', ')})`;
}

/**
 * @param {object} json vat.json
 * @param {object} [options]
 * @param {{min: number[], max: number[]}} [options.bounds] decode with these bounds instead
 *   (vat-render.mjs --break bounds)
 */
export function specChunk(json, options = {}) {
  const { width: W, rows_per_frame: R, planes: K, frames_per_texture: FPT } = json.layout;
  const bounds = options.bounds ?? json.bounds;
  const count = json.textures.length;
  const encoding = json.encoding;
  if (json.version !== 2) throw new Error(`spec decoder: vat.json version ${json.version} not supported (2)`);
  if (!['low', 'medium', 'high', 'rgba16', 'half'].includes(encoding)) throw new Error(`spec decoder: encoding ${encoding} not supported`);
  // rgba16 textures are unsigned-integer ones (RGBA16UI); the fetch returns 0..65535 as floats.
  const sampler = encoding === 'rgba16' ? 'usampler2D' : 'sampler2D';
  const lines = [];
  for (let i = 0; i < count; i++) {
    lines.push(`uniform highp ${sampler} vatPositions${i};`, `uniform highp ${sampler} vatNormals${i};`);
  }
  // texelFetch on sampler arrays needs constant indices in GLSL ES 3.0: branch instead.
  const fetchFn = (name) => [
    `vec4 ${name}Fetch(int tex, ivec2 c) {`,
    ...Array.from({ length: count }, (_, i) => `  ${i ? 'else ' : ''}if (tex == ${i}) return vec4(texelFetch(${name}${i}, c, 0));`),
    '  return vec4(0.0);',
    '}',
  ].join('\n');
  const relative = json.mode === 'relative';
  const decodeT = {
    low: 'vatPositionsFetch(tex, ivec2(col, base)).rgb',
    medium: '(vatBytes(vatPositionsFetch(tex, ivec2(col, base))) * 256.0 + vatBytes(vatPositionsFetch(tex, ivec2(col, base + plane)))) / 65535.0',
    high: '(vatBytes(vatPositionsFetch(tex, ivec2(col, base))) * 65536.0 + vatBytes(vatPositionsFetch(tex, ivec2(col, base + plane))) * 256.0'
      + ' + vatBytes(vatPositionsFetch(tex, ivec2(col, base + 2 * plane)))) / 16777215.0',
    rgba16: 'vatPositionsFetch(tex, ivec2(col, base)).rgb / 65535.0',
    half: 'vatPositionsFetch(tex, ivec2(col, base)).rgb',
  }[encoding];
  const value = encoding === 'half' ? 't' : 'VAT_MIN + t * (VAT_MAX - VAT_MIN)';
  const octa = encoding === 'half' ? 'vec2 o = c.rg;'
    : encoding === 'rgba16' ? 'vec2 o = c.rg / 65535.0 * 2.0 - 1.0;'
    : [
      '  vec3 b = vatBytes(c);',
      '  float x = 16.0 * b.r + floor(b.g / 16.0);',
      '  float y = 256.0 * mod(b.g, 16.0) + b.b;',
      '  vec2 o = vec2(x, y) / 4095.0 * 2.0 - 1.0;',
    ].join('\n');

  lines.push(
    `const int VAT_W = ${W};`,
    `const int VAT_R = ${R};`,
    `const int VAT_K = ${K};`,
    `const int VAT_FPT = ${FPT};`,
    `const int VAT_FRAMES = ${json.frames};`,
    `const float VAT_FRAME_RATE = ${glslFloat(json.frame_rate)};`,
    `const vec3 VAT_MIN = ${glslVec3(bounds.min)};`,
    `const vec3 VAT_MAX = ${glslVec3(bounds.max)};`,
    'struct VatFrame { int a; int b; float t; };',
    fetchFn('vatPositions'),
    fetchFn('vatNormals'),
    // Bytes 0..255 exactly; t of a 24-bit value then stays exact in float32.
    'vec3 vatBytes(vec4 c) { return floor(c.rgb * 255.0 + 0.5); }',
    // frameSpan = duration × frame_rate: the last frame sits at the clip's exact end.
    'VatFrame vatFrame(float firstFrame, float frameSpan, float looping, float time) {',
    '  float f = time * VAT_FRAME_RATE;',
    '  if (looping > 0.5 && frameSpan > 0.0) f = mod(f, frameSpan);',
    '  f = clamp(f, 0.0, frameSpan);',
    '  float last = ceil(frameSpan - 0.001);',
    '  float i = min(floor(f), last);',
    '  float j = min(i + 1.0, last);',
    '  VatFrame r;',
    '  r.a = int(firstFrame + i);',
    '  r.b = int(firstFrame + j);',
    '#ifdef VAT_INTERPOLATE',
    '  r.t = j > i ? clamp((f - i) / (min(j, frameSpan) - i), 0.0, 1.0) : 0.0;',
    '#else',
    '  r.t = 0.0;',
    '#endif',
    '  return r;',
    '}',
    'vec3 vatDecodePosition(ivec2 v, int g) {',
    '  int tex = g / VAT_FPT;',
    '  int l = g - tex * VAT_FPT;',
    '  int col = v.x;',
    // Format 2: in a texture of n frames, plane p of vertex row y at local frame l is row
    // (p * R + y) * n + l (planes, then vertex rows, then frames).
    '  int n = min(VAT_FPT, VAT_FRAMES - tex * VAT_FPT);',
    '  int base = v.y * n + l;',
    '  int plane = VAT_R * n;',
    `  vec3 t = ${decodeT};`,
    `  return ${value};`,
    '}',
    'vec3 vatDecodeNormal(ivec2 v, int g) {',
    '  int tex = g / VAT_FPT;',
    '  int l = g - tex * VAT_FPT;',
    '  int n = min(VAT_FPT, VAT_FRAMES - tex * VAT_FPT);',
    '  vec4 c = vatNormalsFetch(tex, ivec2(v.x, v.y * n + l));',
    octa,
    '  vec3 n = vec3(o, 1.0 - abs(o.x) - abs(o.y));',
    '  if (n.z < 0.0) {',
    '    vec2 s = vec2(n.x >= 0.0 ? 1.0 : -1.0, n.y >= 0.0 ? 1.0 : -1.0);',
    '    n.xy = (1.0 - abs(n.yx)) * s;',
    '  }',
    '  return normalize(n);',
    '}',
    'ivec2 vatTexel(vec2 texel) { return ivec2(texel * vec2(float(VAT_W), float(VAT_R))); }',
    'vec3 vatPosition(vec2 texel, vec3 restPosition, VatFrame f) {',
    '  ivec2 v = vatTexel(texel);',
    '  vec3 p = mix(vatDecodePosition(v, f.a), vatDecodePosition(v, f.b), f.t);',
    relative ? '  return restPosition + p;' : '  return p;',
    '}',
    'vec3 vatNormal(vec2 texel, VatFrame f) {',
    '  ivec2 v = vatTexel(texel);',
    '  return normalize(mix(vatDecodeNormal(v, f.a), vatDecodeNormal(v, f.b), f.t));',
    '}',
  );
  return `// Kiln VAT decoder written from docs/vat.md (gltf-check/vat-spec-glsl.mjs)\n${lines.join('\n')}\n`;
}
