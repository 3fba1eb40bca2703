// A crowd of foxes drawn from Kiln vertex animation textures: one InstancedMesh per
// primitive of the baked mesh, every instance with its own clip and phase (the
// instanced attribute `vatClip`), all driven by one `vatTime` uniform. The JS work per
// frame is the same for 50 or 10 000 foxes.
//
// Query parameters:
//   n=2000          instances (1…10000)
//   set=auto        which bake of baked/index.json to show (bake.sh writes it)
//   vat=URL[,URL]   baked mesh folders to show instead (all meshes of one model)
//   mode=skinned    three.js' usual path instead: cloned SkinnedMeshes + AnimationMixers
//   model=URL       source model for mode=skinned (default assets/Fox.glb)
//   seed=1          layout and clip choice (the same picture for the same seed)

import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';
import * as SkeletonUtils from 'three/addons/utils/SkeletonUtils.js';

import { loadVat } from './kiln-vat.js';

const MAX_INSTANCES = 10000;
const STATS_WINDOW = 60; // frames averaged for the numbers shown
const WARMUP_FRAMES = 1; // the first draw uploads textures and instance data: not counted

const params = new URLSearchParams(location.search);
const n = Math.min(Math.max(parseInt(params.get('n') ?? '2000', 10) || 2000, 1), MAX_INSTANCES);
const mode = params.get('mode') === 'skinned' ? 'skinned' : 'vat';
const random = mulberry32(parseInt(params.get('seed') ?? '1', 10) || 1);

const statsEl = document.getElementById('stats');
const stats = {
  n, mode, ready: false, error: null, frames: 0,
  jsMsPerFrame: 0, fps: 0, drawCalls: 0, triangles: 0,
  // Running totals, so a test can average over any window: (Δ jsMsTotal) / (Δ frames).
  jsMsTotal: 0, lastFrameTime: 0, warmupFrames: WARMUP_FRAMES,
  encoding: null, textureBytes: 0, clips: [],
};
window.kilnCrowdStats = stats;

// Keep the current parameters when following the HUD's links.
for (const a of document.querySelectorAll('#hud a')) {
  const merged = new URLSearchParams(location.search);
  for (const [k, v] of new URL(a.href).searchParams) merged.set(k, v);
  if (!new URL(a.href).searchParams.has('mode')) merged.delete('mode');
  a.href = `?${merged}`;
}

// Small seeded PRNG: the same crowd on every load (screenshots, timings).
function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function vatFolders() {
  if (params.get('vat')) return params.get('vat').split(',').filter(Boolean);
  const response = await fetch('baked/index.json');
  if (!response.ok) throw new Error('no baked/index.json: run `bash bake.sh` first (see README.md)');
  const index = await response.json();
  const names = Object.keys(index.sets ?? {});
  const name = params.get('set') ?? (names.includes('auto') ? 'auto' : names[0]);
  if (!index.sets?.[name]?.length) throw new Error(`baked/index.json has no set "${name}" (sets: ${names.join(', ')})`);
  return index.sets[name].map((folder) => `baked/${folder}`);
}

// Grid placement with jitter and a random heading; spacing from the animated footprint.
function layout(bounds) {
  const size = bounds.getSize(new THREE.Vector3());
  const spacing = Math.max(size.x, size.z) * 0.75;
  const side = Math.ceil(Math.sqrt(n));
  const matrices = [];
  const position = new THREE.Vector3();
  const rotation = new THREE.Quaternion();
  const scale = new THREE.Vector3(1, 1, 1);
  const up = new THREE.Vector3(0, 1, 0);
  for (let i = 0; i < n; i++) {
    const row = Math.floor(i / side);
    const column = i % side;
    position.set(
      (column - (side - 1) / 2 + (random() - 0.5) * 0.4) * spacing,
      0,
      (row - (side - 1) / 2 + (random() - 0.5) * 0.4) * spacing,
    );
    rotation.setFromAxisAngle(up, random() * Math.PI * 2);
    matrices.push(new THREE.Matrix4().compose(position, rotation, scale));
  }
  return { matrices, extent: side * spacing };
}

function buildScene(extent, height) {
  const scene = new THREE.Scene();
  scene.background = new THREE.Color(0x9cc3e0);
  scene.fog = new THREE.Fog(0x9cc3e0, extent * 1.2, extent * 3);
  scene.add(new THREE.HemisphereLight(0xffffff, 0x5a6b3a, 1.6));
  const sun = new THREE.DirectionalLight(0xffffff, 2.0);
  sun.position.set(1, 2, 1.5);
  scene.add(sun);
  const ground = new THREE.Mesh(
    new THREE.PlaneGeometry(extent * 4, extent * 4),
    new THREE.MeshLambertMaterial({ color: 0x7fa35a }),
  );
  ground.rotation.x = -Math.PI / 2;
  scene.add(ground);

  // From just outside the crowd's front edge, looking across it: near foxes large, the
  // rest of the crowd filling the view behind them.
  const camera = new THREE.PerspectiveCamera(45, innerWidth / innerHeight, height * 0.2, extent * 6);
  const back = Math.max(extent * 0.5, height * 4);
  camera.position.set(0, Math.max(extent * 0.16, height * 1.5), back + height * 2);
  camera.lookAt(0, 0, back - Math.max(extent * 0.55, height * 6));
  return { scene, camera };
}

async function buildVatCrowd() {
  const vats = await Promise.all((await vatFolders()).map((folder) => loadVat(folder)));
  const bounds = vats.reduce((b, vat) => b.union(vat.bounds), new THREE.Box3());
  const { matrices, extent } = layout(bounds);
  const { scene, camera } = buildScene(extent, bounds.max.y - bounds.min.y);

  // Clip and phase per instance, chosen once; every mesh of the model gets the same choice.
  const clips = vats[0].clips;
  const choices = matrices.map(() => {
    const clip = Math.floor(random() * clips.length);
    return { clip, phase: random() * vats[0].clipDuration(clips[clip]) };
  });

  for (const vat of vats) {
    const vatClip = new Float32Array(n * 4);
    choices.forEach(({ clip, phase }, i) => {
      vatClip.set(vat.clipVector(vat.clips[clip], phase, { repeat: true }), i * 4);
    });
    const vatClipAttribute = new THREE.InstancedBufferAttribute(vatClip, 4);
    for (const primitive of vat.primitives) {
      primitive.geometry.setAttribute('vatClip', vatClipAttribute);
      const mesh = new THREE.InstancedMesh(primitive.geometry, vat.material(primitive.material, { instanced: true }), n);
      matrices.forEach((m, i) => mesh.setMatrixAt(i, m));
      scene.add(mesh);
    }
    stats.textureBytes += vat.json.textures.reduce((s, t) => s + (t.positions_bytes ?? 0) + (t.normals_bytes ?? 0), 0);
  }
  stats.encoding = vats.map((v) => v.json.encoding).join(',');
  stats.clips = clips.map((c) => c.name);
  stats.vertices = vats.reduce((s, v) => s + v.json.vertices, 0) * n;
  const time = vats.map((vat) => vat.uniforms.vatTime);
  return { scene, camera, update: (seconds) => { for (const t of time) t.value = seconds; } };
}

// For comparison: what three.js does without VAT (a skeleton and a mixer per fox).
async function buildSkinnedCrowd() {
  const gltf = await new GLTFLoader().loadAsync(params.get('model') ?? 'assets/Fox.glb');
  const bounds = new THREE.Box3().setFromObject(gltf.scene, true);
  const { matrices, extent } = layout(bounds);
  const { scene, camera } = buildScene(extent, bounds.max.y - bounds.min.y);
  const mixers = matrices.map((matrix) => {
    const fox = SkeletonUtils.clone(gltf.scene);
    matrix.decompose(fox.position, fox.quaternion, fox.scale);
    scene.add(fox);
    const mixer = new THREE.AnimationMixer(fox);
    const clip = gltf.animations[Math.floor(random() * gltf.animations.length)];
    mixer.clipAction(clip).play();
    mixer.setTime(random() * clip.duration);
    return mixer;
  });
  stats.encoding = 'skinned';
  stats.clips = gltf.animations.map((c) => c.name);
  let last = null;
  return {
    scene, camera,
    update: (seconds) => {
      const dt = last === null ? 0 : seconds - last;
      last = seconds;
      for (const mixer of mixers) mixer.update(dt);
    },
  };
}

async function main() {
  const renderer = new THREE.WebGLRenderer({ antialias: true });
  renderer.setPixelRatio(Math.min(devicePixelRatio, 2));
  renderer.setSize(innerWidth, innerHeight);
  document.body.prepend(renderer.domElement);

  const { scene, camera, update } = mode === 'skinned' ? await buildSkinnedCrowd() : await buildVatCrowd();
  addEventListener('resize', () => {
    camera.aspect = innerWidth / innerHeight;
    camera.updateProjectionMatrix();
    renderer.setSize(innerWidth, innerHeight);
  });
  // Compile before timing, so shader compilation is not counted as a slow frame.
  await renderer.compileAsync(scene, camera);

  const jsTimes = new Float64Array(STATS_WINDOW);
  const frameStarts = new Float64Array(STATS_WINDOW);
  const start = performance.now();
  let measuredSince = start;
  let drawn = 0;
  let lastHud = 0;

  function frame(now) {
    requestAnimationFrame(frame);
    const t0 = performance.now();
    update((t0 - start) / 1000);
    renderer.render(scene, camera);
    const jsMs = performance.now() - t0;
    if (++drawn <= WARMUP_FRAMES) {
      measuredSince = now;
      return;
    }

    const slot = stats.frames % STATS_WINDOW;
    jsTimes[slot] = jsMs;
    const oldestStart = stats.frames >= STATS_WINDOW ? frameStarts[slot] : measuredSince;
    frameStarts[slot] = now;
    stats.frames++;
    stats.jsMsTotal += jsMs;
    stats.lastFrameTime = now;
    const counted = Math.min(stats.frames, STATS_WINDOW);
    let sum = 0;
    for (let i = 0; i < counted; i++) sum += jsTimes[i];
    stats.jsMsPerFrame = sum / counted;
    stats.fps = now > oldestStart ? (1000 * counted) / (now - oldestStart) : 0;
    stats.drawCalls = renderer.info.render.calls;
    stats.triangles = renderer.info.render.triangles;
    stats.ready = true;

    if (now - lastHud > 250) {
      lastHud = now;
      statsEl.textContent = `${n} foxes (${mode === 'vat' ? `VAT, ${stats.encoding}` : 'three.js skinning'}), `
        + `${stats.drawCalls} draw calls, ${(stats.triangles / 1e6).toFixed(2)} M triangles\n`
        + `JS ${stats.jsMsPerFrame.toFixed(2)} ms/frame (rAF callback incl. render(), last ${counted} frames), `
        + `${stats.fps.toFixed(1)} fps`;
    }
  }
  requestAnimationFrame(frame);
}

main().catch((error) => {
  console.error(error);
  stats.error = String(error?.message ?? error);
  statsEl.innerHTML = '';
  const span = document.createElement('span');
  span.className = 'error';
  span.textContent = stats.error;
  statsEl.append(span);
});
