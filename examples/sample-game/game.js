// Fox Coins: steer the fox around a meadow and collect the spinning coins.
import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';
import { MeshoptDecoder } from 'three/addons/libs/meshopt_decoder.module.js';

const ARENA = 14;          // half-size of the playable square
const COINS_PER_ROUND = 6;
const WALK_SPEED = 3.5;    // units per second
const RUN_SPEED = 7;
const PICKUP_RADIUS = 1.1;

const scoreEl = document.getElementById('score');
const messageEl = document.getElementById('message');

// --- Scene ---------------------------------------------------------------
const renderer = new THREE.WebGLRenderer({ antialias: true });
renderer.setPixelRatio(Math.min(window.devicePixelRatio, 2)); // cap fill-rate on phones
renderer.setSize(window.innerWidth, window.innerHeight);
renderer.shadowMap.enabled = true;
document.body.appendChild(renderer.domElement);

const scene = new THREE.Scene();
scene.background = new THREE.Color(0x87b5d9);
scene.fog = new THREE.Fog(0x87b5d9, 25, 60);

const camera = new THREE.PerspectiveCamera(50, window.innerWidth / window.innerHeight, 0.1, 200);
const cameraOffset = new THREE.Vector3(0, 8, 10); // high enough to spot coins ahead

scene.add(new THREE.HemisphereLight(0xffffff, 0x4a6b3a, 1.6));
const sun = new THREE.DirectionalLight(0xffffff, 2);
sun.position.set(8, 15, 6);
sun.castShadow = true;
sun.shadow.mapSize.set(1024, 1024);
Object.assign(sun.shadow.camera, { left: -20, right: 20, top: 20, bottom: -20 });
scene.add(sun);

// The meadow runs into the fog so there is no visible world edge; the lighter
// square shows where the fox is allowed to go.
const ground = new THREE.Mesh(
  new THREE.PlaneGeometry(200, 200),
  new THREE.MeshStandardMaterial({ color: 0x5d8c3e }),
);
ground.rotation.x = -Math.PI / 2;
ground.receiveShadow = true;
scene.add(ground);
const arena = new THREE.Mesh(
  new THREE.PlaneGeometry(ARENA * 2 + 1, ARENA * 2 + 1),
  new THREE.MeshStandardMaterial({ color: 0x7db356 }),
);
arena.rotation.x = -Math.PI / 2;
arena.position.y = 0.01; // just above the meadow to avoid z-fighting
arena.receiveShadow = true;
scene.add(arena);

// --- Coins ---------------------------------------------------------------
// One shared geometry/material: coins are identical, so this keeps draw setup cheap.
const coinGeometry = new THREE.CylinderGeometry(0.45, 0.45, 0.1, 24).rotateX(Math.PI / 2);
// A little emissive keeps coins readable from every angle (no env map to reflect).
const coinMaterial = new THREE.MeshStandardMaterial({ color: 0xffc83d, emissive: 0x6b4a00, metalness: 0.3, roughness: 0.4 });
const coins = [];
let score = 0;

function spawnCoins() {
  for (let i = 0; i < COINS_PER_ROUND; i++) {
    const coin = new THREE.Mesh(coinGeometry, coinMaterial);
    coin.castShadow = true;
    // Keep coins away from the centre and the fox so every coin takes some travel.
    do {
      const angle = Math.random() * Math.PI * 2;
      const dist = 4 + Math.random() * (ARENA - 5);
      coin.position.set(Math.cos(angle) * dist, 0.8, Math.sin(angle) * dist);
    } while (fox.position.distanceTo(coin.position) < 4);
    coin.userData.phase = Math.random() * Math.PI * 2;
    coins.push(coin);
    scene.add(coin);
  }
  updateHud();
}

function updateHud() {
  scoreEl.textContent = `Coins: ${score} / ${score + coins.length}`;
}

// --- Input ---------------------------------------------------------------
const keys = new Set();
window.addEventListener('keydown', (e) => { keys.add(e.code); if (e.code.startsWith('Arrow')) e.preventDefault(); });
window.addEventListener('keyup', (e) => keys.delete(e.code));
window.addEventListener('blur', () => keys.clear()); // avoid a "stuck" key after alt-tab

// Touch/mouse: while a pointer is held, the fox heads for that spot on the ground.
const raycaster = new THREE.Raycaster();
const pointer = new THREE.Vector2();
let pointerTarget = null;
function aimPointer(e) {
  pointer.set((e.clientX / window.innerWidth) * 2 - 1, -(e.clientY / window.innerHeight) * 2 + 1);
  raycaster.setFromCamera(pointer, camera);
  const hit = raycaster.intersectObject(ground)[0];
  pointerTarget = hit ? hit.point : null;
}
renderer.domElement.addEventListener('pointerdown', (e) => { renderer.domElement.setPointerCapture(e.pointerId); aimPointer(e); });
renderer.domElement.addEventListener('pointermove', (e) => { if (pointerTarget) aimPointer(e); });
renderer.domElement.addEventListener('pointerup', () => { pointerTarget = null; });
renderer.domElement.addEventListener('pointercancel', () => { pointerTarget = null; });

const held = (...codes) => (codes.some((c) => keys.has(c)) ? 1 : 0);

function readInput(fox) {
  // Screen-relative: the camera always looks along -Z, so "up" means -Z.
  const dir = new THREE.Vector3(
    held('ArrowRight', 'KeyD') - held('ArrowLeft', 'KeyA'),
    0,
    held('ArrowDown', 'KeyS') - held('ArrowUp', 'KeyW'),
  );
  let run = keys.has('ShiftLeft') || keys.has('ShiftRight');
  if (dir.lengthSq() === 0 && pointerTarget) {
    dir.subVectors(pointerTarget, fox.position).setY(0);
    if (dir.length() < 0.3) dir.set(0, 0, 0); // arrived: stop instead of jittering
    run = dir.length() > 6; // far taps mean "hurry"
  }
  return { dir: dir.normalize(), run };
}

// --- Fox -----------------------------------------------------------------
let fox = null;
let mixer = null;
const actions = {};
let current = null;

function play(name) {
  if (current === actions[name]) return;
  actions[name].reset().play();
  if (current) current.crossFadeTo(actions[name], 0.25, false);
  current = actions[name];
}

// Served by Kiln, the model comes in the variant Kiln chose for this device (meshopt where it
// decodes fast, else quantized; with `[images] ktx2` in kiln.toml, GPU-compressed textures
// where this device's format keeps their quality), with a fallback when the decoder fails;
// from any other server, GLTFLoader loads the file itself. Both give the same glTF.
const gltfLoader = new GLTFLoader().setMeshoptDecoder(MeshoptDecoder);
// KTX2Loader and the transcoder three.js ships are imported only when the build has a KTX2
// variant of the model (kiln.model calls this then), so a game without one loads nothing more.
const ktx2 = () => import('three/addons/loaders/KTX2Loader.js').then(({ KTX2Loader }) => {
  const loader = new KTX2Loader()
    .setTranscoderPath(new URL('./vendor/addons/libs/basis/', document.baseURI).href)
    .detectSupport(renderer);
  gltfLoader.setKTX2Loader(loader);
  return loader;
});
function loadFox() {
  const direct = () => new Promise((resolve, reject) => gltfLoader.load('assets/Fox.glb', resolve, undefined, reject));
  if (!globalThis.kiln?.model) return direct();
  return kiln.model('assets/Fox.glb', {
    decoder: MeshoptDecoder,
    ktx2,
    parse: (buf, info) => new Promise((resolve, reject) => gltfLoader.parse(buf, new URL('.', info.url).href, resolve, reject)),
  }).then((r) => r.result, (err) => {
    console.warn('kiln.model failed, loading the file itself:', err.reason ?? err);
    return direct();
  });
}

loadFox().then((gltf) => {
  fox = gltf.scene;
  fox.scale.setScalar(0.02); // the model is authored ~80 units tall
  fox.traverse((o) => { if (o.isMesh) o.castShadow = true; });
  scene.add(fox);

  mixer = new THREE.AnimationMixer(fox);
  for (const clip of gltf.animations) actions[clip.name] = mixer.clipAction(clip);
  play('Survey');

  spawnCoins();
  messageEl.textContent = '';
  document.body.dataset.state = 'ready'; // lets automated smoke tests know the model loaded
}, (err) => {
  console.error('Failed to load Fox.glb', err);
  messageEl.textContent = 'Could not load the fox :(';
  document.body.dataset.state = 'error';
});

// --- Loop ----------------------------------------------------------------
const clock = new THREE.Clock();
const targetQuat = new THREE.Quaternion();
const up = new THREE.Vector3(0, 1, 0);

function update(dt, time) {
  const { dir, run } = readInput(fox);
  if (dir.lengthSq() > 0) {
    fox.position.addScaledVector(dir, (run ? RUN_SPEED : WALK_SPEED) * dt);
    fox.position.clamp(new THREE.Vector3(-ARENA, 0, -ARENA), new THREE.Vector3(ARENA, 0, ARENA));
    // The model faces +Z; turn smoothly rather than snapping to the new heading.
    targetQuat.setFromAxisAngle(up, Math.atan2(dir.x, dir.z));
    fox.quaternion.rotateTowards(targetQuat, 10 * dt);
    play(run ? 'Run' : 'Walk');
  } else {
    play('Survey');
  }
  mixer.update(dt);

  for (let i = coins.length - 1; i >= 0; i--) {
    const coin = coins[i];
    coin.rotation.y += 3 * dt;
    coin.position.y = 0.8 + Math.sin(time * 3 + coin.userData.phase) * 0.15;
    if (coin.position.distanceTo(fox.position.clone().setY(coin.position.y)) < PICKUP_RADIUS) {
      scene.remove(coin);
      coins.splice(i, 1);
      score++;
      updateHud();
      if (coins.length === 0) {
        messageEl.textContent = 'All coins collected!';
        setTimeout(() => { messageEl.textContent = ''; spawnCoins(); }, 2000);
      }
    }
  }
}

renderer.setAnimationLoop(() => {
  const dt = Math.min(clock.getDelta(), 0.1); // a backgrounded tab must not teleport the fox
  if (fox) {
    update(dt, clock.elapsedTime);
    // Follow camera: ease towards a point behind the fox for a less jittery view.
    camera.position.lerp(fox.position.clone().add(cameraOffset), 1 - Math.exp(-4 * dt));
    camera.lookAt(fox.position.x, fox.position.y + 1, fox.position.z);
  } else {
    camera.position.copy(cameraOffset);
    camera.lookAt(0, 1, 0);
  }
  renderer.render(scene, camera);
});

window.addEventListener('resize', () => {
  camera.aspect = window.innerWidth / window.innerHeight;
  camera.updateProjectionMatrix();
  renderer.setSize(window.innerWidth, window.innerHeight);
});
