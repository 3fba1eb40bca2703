// The page of vat-render.mjs: renders a source model (GLTFLoader + AnimationMixer,
// three's own skinning/morphing) and its VAT bake (examples/crowd/kiln-vat.js) with the
// same camera at the same clip times, and compares the pixels. Node calls
// window.vatRender.run(config) and gets numbers (and PNG data URLs) back.

import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';

import { loadVat } from '/runtime/kiln-vat.js';
import { specChunk } from '/tool/vat-spec-glsl.mjs';

const BACKGROUND = [0, 0, 0, 0]; // transparent: alpha tells what a model covers

// The glTF node of a three object: GLTFLoader records { nodes: index } on the
// object made for a node (a multi-primitive mesh's primitives are its children).
function nodeOf(parser, object) {
  for (let o = object; o; o = o.parent) {
    const entry = parser.associations.get(o);
    if (entry && entry.nodes !== undefined) return entry.nodes;
  }
  return undefined;
}

// Wider bounds than baked: decoded positions stretch away from the bounds' centre.
function brokenBounds(bounds) {
  const span = Math.max(...bounds.max.map((m, a) => m - bounds.min[a]), 1e-6);
  return {
    min: bounds.min.map((m, a) => m - 0.1 * Math.max(bounds.max[a] - m, span * 0.1)),
    max: bounds.max.map((m, a) => m + 0.1 * Math.max(m - bounds.min[a], span * 0.1)),
  };
}

// The baked chunk has the bounds as literals: find vec3 literals equal to bounds.min,
// bounds.max or their difference (within float printing) and substitute.
function breakChunkBounds(chunk, bounds, broken) {
  const range = (b) => b.max.map((m, a) => m - b.min[a]);
  const targets = [
    [bounds.min, broken.min], [bounds.max, broken.max], [range(bounds), range(broken)],
  ];
  const close = (a, b) => a.every((x, i) => Math.abs(x - b[i]) <= 1e-5 * Math.max(1, Math.abs(b[i])));
  let replaced = 0;
  const out = chunk.replace(/vec3\s*\(([^()]*)\)/g, (whole, inner) => {
    const parts = inner.split(',').map((s) => Number(s.trim()));
    if (parts.length !== 3 || parts.some((x) => !Number.isFinite(x))) return whole;
    const hit = targets.find(([from]) => close(parts, from));
    if (!hit) return whole;
    replaced++;
    return `vec3(${hit[1].map((x) => x.toPrecision(9)).join(', ')})`;
  });
  return { chunk: out, replaced };
}

// A camera looking at the box from a fixed direction, as close as lets every corner in.
function fitCamera(box, aspect) {
  const fov = 30;
  const tan = Math.tan(THREE.MathUtils.degToRad(fov / 2));
  const center = box.getCenter(new THREE.Vector3());
  const back = new THREE.Vector3(1, 0.45, 0.4).normalize(); // from the centre towards the camera
  const right = new THREE.Vector3(0, 1, 0).cross(back).normalize();
  const up = back.clone().cross(right);
  let distance = 0;
  let depth = 0;
  const corner = new THREE.Vector3();
  for (let i = 0; i < 8; i++) {
    corner.set(i & 1 ? box.max.x : box.min.x, i & 2 ? box.max.y : box.min.y, i & 4 ? box.max.z : box.min.z).sub(center);
    const z = corner.dot(back);
    depth = Math.max(depth, Math.abs(z));
    distance = Math.max(distance, Math.abs(corner.dot(right)) / (tan * aspect) + z, Math.abs(corner.dot(up)) / tan + z);
  }
  distance *= 1.05;
  const camera = new THREE.PerspectiveCamera(fov, aspect, Math.max(distance - depth * 1.5, distance * 1e-3), distance + depth * 1.5);
  camera.position.copy(center).addScaledVector(back, distance);
  camera.lookAt(center);
  camera.updateProjectionMatrix();
  camera.updateMatrixWorld();
  return camera;
}

function addLights(scene) {
  scene.add(new THREE.HemisphereLight(0xffffff, 0x444444, 1.5));
  const sun = new THREE.DirectionalLight(0xffffff, 2);
  sun.position.set(1, 2, 1.5);
  scene.add(sun);
}

function readPixels(renderer) {
  const gl = renderer.getContext();
  const { width, height } = renderer.domElement;
  const pixels = new Uint8Array(width * height * 4);
  gl.readPixels(0, 0, width, height, gl.RGBA, gl.UNSIGNED_BYTE, pixels);
  return pixels;
}

function compare(a, b, threshold) {
  let maxDiff = 0; let sum = 0; let union = 0; let coveredA = 0; let coveredB = 0;
  let coverageMismatch = 0; let over = 0;
  for (let i = 0; i < a.length; i += 4) {
    const inA = a[i + 3] > 0;
    const inB = b[i + 3] > 0;
    if (!inA && !inB) continue;
    union++;
    if (inA) coveredA++;
    if (inB) coveredB++;
    if (inA !== inB) coverageMismatch++;
    const d = Math.max(Math.abs(a[i] - b[i]), Math.abs(a[i + 1] - b[i + 1]), Math.abs(a[i + 2] - b[i + 2]), Math.abs(a[i + 3] - b[i + 3]));
    if (d > maxDiff) maxDiff = d;
    if (d > threshold) over++;
    sum += d;
  }
  return {
    max_diff: maxDiff,
    frac_over: union ? over / union : 0,
    pixels_over: over,
    mean_diff: union ? sum / union : 0,
    covered_source: coveredA,
    covered_vat: coveredB,
    coverage_mismatch: coverageMismatch,
    coverage_mismatch_frac: union ? coverageMismatch / union : 0,
  };
}

// PNG of a bottom-up RGBA buffer over a grey background; or the difference of two
// (grey = |difference| x 4, red = covered by one side only).
function toPng(width, height, pixels, other) {
  const canvas = document.createElement('canvas');
  canvas.width = width;
  canvas.height = height;
  const ctx = canvas.getContext('2d');
  const image = ctx.createImageData(width, height);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const s = ((height - 1 - y) * width + x) * 4;
      const d = (y * width + x) * 4;
      if (other) {
        const inA = pixels[s + 3] > 0;
        const inB = other[s + 3] > 0;
        let diff = 0;
        for (let c = 0; c < 3; c++) diff = Math.max(diff, Math.abs(pixels[s + c] - other[s + c]));
        const g = Math.min(255, diff * 4);
        image.data.set(inA !== inB ? [255, 0, 0, 255] : [g, g, g, 255], d);
      } else {
        const alpha = pixels[s + 3] / 255;
        for (let c = 0; c < 3; c++) image.data[d + c] = Math.round(pixels[s + c] + 64 * (1 - alpha));
        image.data[d + 3] = 255;
      }
    }
  }
  ctx.putImageData(image, 0, 0);
  return canvas.toDataURL('image/png');
}

async function run(config) {
  const { size, threshold, material: materialKind, decoder, breakMode } = config;
  const renderer = new THREE.WebGLRenderer({ antialias: false, alpha: true, preserveDrawingBuffer: true });
  renderer.setPixelRatio(1);
  renderer.setSize(size, size);
  renderer.setClearColor(new THREE.Color(...BACKGROUND.slice(0, 3)), BACKGROUND[3]);
  document.body.append(renderer.domElement);
  const shaderErrors = [];
  renderer.debug.onShaderError = (gl, program, vs, fs) => {
    shaderErrors.push([gl.getProgramInfoLog(program), gl.getShaderInfoLog(vs), gl.getShaderInfoLog(fs)].filter(Boolean).join('\n').trim());
  };

  const [source, vats] = await Promise.all([
    new GLTFLoader().loadAsync(config.sourceUrl),
    Promise.all(config.vatUrls.map((url) => loadVat(url))),
  ]);

  // Source: only the meshes of the baked nodes (a static mesh beside them is not baked).
  const bakedNodes = new Set(vats.map((v) => v.json.node));
  const sourceMeshes = [];
  source.scene.traverse((o) => { if (o.isMesh) sourceMeshes.push(o); });
  let shown = sourceMeshes.filter((o) => bakedNodes.has(nodeOf(source.parser, o)));
  const notes = [];
  if (shown.length === 0) {
    notes.push(`no source mesh belongs to node(s) ${[...bakedNodes]}: showing every skinned/morphed mesh`);
    shown = sourceMeshes.filter((o) => o.isSkinnedMesh || o.morphTargetInfluences);
  }
  for (const o of sourceMeshes) o.visible = shown.includes(o);

  const vat0 = vats[0];
  const vatClip = vat0.clip(config.clip);
  const clipIndex = vat0.clips.indexOf(vatClip);
  const animation = source.animations.find((a) => a.name === vatClip.name) ?? source.animations[clipIndex];
  if (!animation) throw new Error(`source has no animation for clip ${vatClip.name} (index ${clipIndex})`);

  // Scenes: source and VAT, the same lights, camera framing the animated bounds.
  const sourceScene = new THREE.Scene();
  sourceScene.add(source.scene);
  const vatScene = new THREE.Scene();
  if (materialKind === 'source') { addLights(sourceScene); addLights(vatScene); }

  for (const o of shown) {
    if (materialKind === 'normal') o.material = new THREE.MeshNormalMaterial({ flatShading: config.flat || !o.geometry.getAttribute('normal'), side: o.material.side });
  }

  const box = new THREE.Box3();
  let breakInfo = { mode: breakMode };
  const vatMaterials = [];
  for (const vat of vats) {
    box.union(vat.bounds);
    let chunk;
    if (decoder === 'spec' || breakMode === 'bounds') {
      const bounds = breakMode === 'bounds' ? brokenBounds(vat.json.bounds) : vat.json.bounds;
      if (decoder === 'spec') {
        chunk = specChunk(vat.json, { bounds });
      } else {
        const broken = breakChunkBounds(vat.glsl, vat.json.bounds, bounds);
        chunk = broken.chunk;
        breakInfo = { ...breakInfo, literals_replaced: broken.replaced };
        if (!broken.replaced) notes.push('--break bounds: no bounds literal found in vat.glsl; chunk left as is');
      }
      if (breakMode === 'bounds') breakInfo = { ...breakInfo, bounds };
      if (vat.json.encoding === 'half') notes.push('half: bounds are not used by the decoder, --break bounds changes nothing');
    }
    const texelOffset = breakMode === 'uv' ? [1, 0] : [0, 0];
    if (breakMode === 'uv') breakInfo = { ...breakInfo, texel_offset: texelOffset };
    for (const p of vat.primitives) {
      const base = materialKind === 'normal'
        ? new THREE.MeshNormalMaterial({ side: p.material.side, flatShading: config.flat || !p.geometry.getAttribute('normal') })
        : p.material;
      const m = vat.material(base, { instanced: false, interpolate: true, chunk, texelOffset });
      m.userData.vatClip.value.set(...vat.clipVector(vat.clip(vatClip.name), 0));
      vatMaterials.push(m);
      vatScene.add(new THREE.Mesh(p.geometry, m));
    }
  }

  const mixer = new THREE.AnimationMixer(source.scene);
  const action = mixer.clipAction(animation);
  action.setLoop(THREE.LoopOnce, 1);
  action.clampWhenFinished = true;
  action.play();
  const poseSource = (t) => {
    action.reset(); // a finished LoopOnce action ignores setTime (see README)
    mixer.setTime(Math.min(t, animation.duration));
    source.scene.updateMatrixWorld(true);
  };

  // Frame what the source covers at the requested times (tighter than the bake's
  // bounds over all clips, and the same for every --break); the bake's bounds if empty.
  const framing = new THREE.Box3();
  for (const t of config.times) {
    poseSource(t);
    for (const o of shown) framing.expandByObject(o, true);
  }
  const camera = fitCamera(framing.isEmpty() ? box : framing, 1);

  const frameRate = vat0.json.frame_rate;
  const results = [];
  const images = [];
  for (const t of config.times) {
    poseSource(t);
    renderer.render(sourceScene, camera);
    const a = readPixels(renderer);

    for (const vat of vats) vat.uniforms.vatTime.value = t;
    renderer.render(vatScene, camera);
    const b = readPixels(renderer);
    if (shaderErrors.length) throw new Error(`shader error:\n${shaderErrors.join('\n---\n').slice(0, 4000)}`);

    const f = t * frameRate;
    results.push({ time: t, frame: Number(f.toFixed(4)), on_frame: Math.abs(f - Math.round(f)) < 1e-6, ...compare(a, b, threshold) });
    if (config.images) {
      images.push({ time: t, source: toPng(size, size, a), vat: toPng(size, size, b), diff: toPng(size, size, a, b) });
    }
  }

  const gl = renderer.getContext();
  const info = gl.getExtension('WEBGL_debug_renderer_info');
  return {
    clip: { name: vatClip.name, index: clipIndex, first_frame: vatClip.first_frame, frames: vatClip.frames,
      looping: vatClip.looping, vat_duration: vat0.clipDuration(vatClip), source_duration: animation.duration },
    vat: vats.map((v) => ({ base: v.base, mesh: v.json.mesh, node: v.json.node, encoding: v.json.encoding, mode: v.json.mode,
      vertices: v.json.vertices, primitives: v.primitives.length, error: v.json.error ?? null })),
    source_meshes_shown: shown.map((o) => o.name),
    break: breakInfo,
    notes,
    renderer: gl.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : gl.RENDERER),
    results,
    images,
  };
}

// Errors come back as data: page.evaluate would add the stack to the message.
window.vatRender = { run: (config) => run(config).catch((e) => ({ error: String(e?.message ?? e) })) };
window.vatRenderReady = true;
