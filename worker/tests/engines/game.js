// Hand-written fake game code for Kiln's engine-detection corpus (a negative).
// It *uses* three.js, Phaser, PixiJS, Babylon.js and PlayCanvas the way game
// code does (imports, globals, API calls, version logging, custom shaders),
// but contains none of the engines themselves, so it must never be reported
// as an engine file. It is never executed.
import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';
import { GLTFLoader } from 'three/examples/jsm/loaders/GLTFLoader.js';

const VERSION = '1.4.2';
const BUILD = { name: 'kiln-demo-game', version: '1.4.2', engine: 'three', revision: 'a1b2c3d' };

console.log('Three.js r' + THREE.REVISION + ' / game v' + VERSION);
if (window.__THREE__) console.log('three already on the page: ' + window.__THREE__);

// --- three.js ---------------------------------------------------------------
const renderer = new THREE.WebGLRenderer({ antialias: true, powerPreference: 'high-performance' });
renderer.setPixelRatio(window.devicePixelRatio);
renderer.setSize(window.innerWidth, window.innerHeight);
renderer.outputColorSpace = THREE.SRGBColorSpace;
renderer.toneMapping = THREE.ACESFilmicToneMapping;
renderer.shadowMap.enabled = true;
renderer.shadowMap.type = THREE.PCFSoftShadowMap;
document.body.appendChild(renderer.domElement);

const scene = new THREE.Scene();
scene.background = new THREE.Color(0x202030);
scene.fog = new THREE.Fog(0x202030, 10, 80);
const camera = new THREE.PerspectiveCamera(60, window.innerWidth / window.innerHeight, 0.1, 1000);
camera.position.set(0, 4, 10);
const controls = new OrbitControls(camera, renderer.domElement);
controls.enableDamping = true;

const sun = new THREE.DirectionalLight(0xffffff, 2.5);
sun.castShadow = true;
scene.add(sun, new THREE.AmbientLight(0x404040), new THREE.HemisphereLight(0xffffbb, 0x080820, 1));

const ground = new THREE.Mesh(
  new THREE.PlaneGeometry(100, 100),
  new THREE.MeshStandardMaterial({ color: 0x556655, roughness: 0.9, metalness: 0.0 })
);
ground.rotation.x = -Math.PI / 2;
ground.receiveShadow = true;
scene.add(ground);

// Custom shaders that pull in three's shader chunks, as many games do.
const waterMaterial = new THREE.ShaderMaterial({
  uniforms: THREE.UniformsUtils.merge([THREE.UniformsLib.fog, { time: { value: 0 } }]),
  vertexShader: /* glsl */ `
    #include <common>
    #include <fog_pars_vertex>
    uniform float time;
    varying vec2 vUv;
    void main() {
      vUv = uv;
      vec3 p = position;
      p.z += sin(p.x * 2.0 + time) * 0.1;
      vec4 mvPosition = modelViewMatrix * vec4(p, 1.0);
      gl_Position = projectionMatrix * mvPosition;
      #include <fog_vertex>
    }`,
  fragmentShader: /* glsl */ `
    #include <common>
    #include <packing>
    #include <fog_pars_fragment>
    varying vec2 vUv;
    void main() {
      gl_FragColor = vec4(0.1, 0.3, 0.6 + 0.2 * vUv.y, 0.8);
      #include <tonemapping_fragment>
      #include <colorspace_fragment>
      #include <fog_fragment>
    }`,
  fog: true,
  transparent: true,
});
const water = new THREE.Mesh(new THREE.PlaneGeometry(20, 20, 64, 64), waterMaterial);
scene.add(water);

const rockMaterial = new THREE.MeshStandardMaterial({ color: 0x888888 });
rockMaterial.onBeforeCompile = (shader) => {
  shader.uniforms.time = { value: 0 };
  shader.vertexShader = 'uniform float time;\n' + shader.vertexShader.replace(
    '#include <begin_vertex>',
    '#include <begin_vertex>\ntransformed.y += sin(time) * 0.05;'
  );
};

const loader = new GLTFLoader();
const mixers = [];
loader.load('assets/models/hero.glb', (gltf) => {
  gltf.scene.traverse((o) => { if (o.isMesh) { o.castShadow = true; o.material.envMapIntensity = 0.8; } });
  scene.add(gltf.scene);
  const mixer = new THREE.AnimationMixer(gltf.scene);
  mixer.clipAction(THREE.AnimationClip.findByName(gltf.animations, 'Run')).play();
  mixers.push(mixer);
}, undefined, (err) => console.error('THREE.GLTFLoader failed to load hero.glb', err));

const clock = new THREE.Clock();
const raycaster = new THREE.Raycaster();
const pointer = new THREE.Vector2();
window.addEventListener('pointermove', (e) => {
  pointer.x = (e.clientX / window.innerWidth) * 2 - 1;
  pointer.y = -(e.clientY / window.innerHeight) * 2 + 1;
});
renderer.setAnimationLoop(() => {
  const dt = clock.getDelta();
  mixers.forEach((m) => m.update(dt));
  waterMaterial.uniforms.time.value += dt;
  raycaster.setFromCamera(pointer, camera);
  controls.update();
  renderer.render(scene, camera);
});
window.addEventListener('resize', () => {
  camera.aspect = window.innerWidth / window.innerHeight;
  camera.updateProjectionMatrix();
  renderer.setSize(window.innerWidth, window.innerHeight);
});

// --- Phaser -----------------------------------------------------------------
class MainScene extends Phaser.Scene {
  constructor() { super({ key: 'MainScene' }); }
  preload() {
    this.load.image('sky', 'assets/sky.png');
    this.load.spritesheet('dude', 'assets/dude.png', { frameWidth: 32, frameHeight: 48 });
    this.load.audio('jump', ['assets/jump.ogg', 'assets/jump.mp3']);
    this.load.tilemapTiledJSON('map', 'assets/level1.json');
  }
  create() {
    this.add.image(400, 300, 'sky');
    this.player = this.physics.add.sprite(100, 450, 'dude');
    this.player.setBounce(0.2).setCollideWorldBounds(true);
    this.anims.create({ key: 'left', frames: this.anims.generateFrameNumbers('dude', { start: 0, end: 3 }), frameRate: 10, repeat: -1 });
    this.cursors = this.input.keyboard.createCursorKeys();
    this.scoreText = this.add.text(16, 16, 'score: 0', { fontSize: '32px', color: '#000' });
    this.cameras.main.startFollow(this.player);
    this.tweens.add({ targets: this.scoreText, alpha: 0.5, duration: 500, yoyo: true, repeat: -1 });
  }
  update() {
    if (this.cursors.left.isDown) { this.player.setVelocityX(-160); this.player.anims.play('left', true); }
    else { this.player.setVelocityX(0); }
  }
}
console.log('Phaser v' + Phaser.VERSION + ' (' + (Phaser.WEBGL ? 'WebGL' : 'Canvas') + ')');
const phaserGame = new Phaser.Game({
  type: Phaser.AUTO,
  width: 800,
  height: 600,
  parent: 'game',
  backgroundColor: '#2d2d2d',
  pixelArt: true,
  scale: { mode: Phaser.Scale.FIT, autoCenter: Phaser.Scale.CENTER_BOTH },
  physics: { default: 'arcade', arcade: { gravity: { y: 300 }, debug: false } },
  scene: [MainScene],
  banner: { hidePhaser: false, text: '#ffffff' },
});

// --- PixiJS -----------------------------------------------------------------
(async () => {
  console.log('PixiJS ' + PIXI.VERSION);
  const app = new PIXI.Application();
  await app.init({ background: '#1099bb', resizeTo: window, antialias: true });
  document.body.appendChild(app.canvas);
  const texture = await PIXI.Assets.load('assets/bunny.png');
  const bunny = new PIXI.Sprite(texture);
  bunny.anchor.set(0.5);
  bunny.x = app.screen.width / 2;
  bunny.y = app.screen.height / 2;
  app.stage.addChild(bunny);
  const g = new PIXI.Graphics().rect(0, 0, 100, 20).fill(0xff0000);
  app.stage.addChild(g, new PIXI.Text({ text: 'Hello PixiJS', style: { fill: 0xffffff } }));
  app.ticker.add((ticker) => { bunny.rotation += 0.1 * ticker.deltaTime; });
})();

// --- Babylon.js -------------------------------------------------------------
const babylonCanvas = document.getElementById('renderCanvas');
const engine = new BABYLON.Engine(babylonCanvas, true, { preserveDrawingBuffer: true, stencil: true });
console.log('Babylon.js v' + BABYLON.Engine.Version + ' (' + BABYLON.Engine.NpmPackage + ')');
const bScene = new BABYLON.Scene(engine);
const bCamera = new BABYLON.ArcRotateCamera('camera', -Math.PI / 2, Math.PI / 2.5, 10, BABYLON.Vector3.Zero(), bScene);
bCamera.attachControl(babylonCanvas, true);
new BABYLON.HemisphericLight('light', new BABYLON.Vector3(0, 1, 0), bScene);
const sphere = BABYLON.MeshBuilder.CreateSphere('sphere', { diameter: 2, segments: 32 }, bScene);
const mat = new BABYLON.StandardMaterial('mat', bScene);
mat.diffuseColor = new BABYLON.Color3(1, 0, 1);
sphere.material = mat;
BABYLON.SceneLoader.ImportMeshAsync('', 'assets/', 'level.glb', bScene).then((r) => r.meshes.forEach((m) => m.checkCollisions = true));
engine.runRenderLoop(() => bScene.render());
window.addEventListener('resize', () => engine.resize());

// --- PlayCanvas -------------------------------------------------------------
const pcCanvas = document.getElementById('application');
const pcApp = new pc.Application(pcCanvas, {
  mouse: new pc.Mouse(document.body),
  keyboard: new pc.Keyboard(window),
  graphicsDeviceOptions: { antialias: true, alpha: false },
});
console.log('PlayCanvas Engine v' + pc.version + ' revision ' + pc.revision);
pcApp.setCanvasFillMode(pc.FILLMODE_FILL_WINDOW);
pcApp.setCanvasResolution(pc.RESOLUTION_AUTO);
const box = new pc.Entity('cube');
box.addComponent('render', { type: 'box' });
pcApp.root.addChild(box);
const cam = new pc.Entity('camera');
cam.addComponent('camera', { clearColor: new pc.Color(0.1, 0.1, 0.1) });
cam.setPosition(0, 0, 3);
pcApp.root.addChild(cam);
const light = new pc.Entity('light');
light.addComponent('light', { type: 'directional' });
pcApp.root.addChild(light);
pcApp.on('update', (dt) => box.rotate(10 * dt, 20 * dt, 30 * dt));
pcApp.start();

export { BUILD, phaserGame, renderer, scene, camera, engine, pcApp };
