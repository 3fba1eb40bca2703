// Kiln VAT runtime for three.js: loads what Kiln's `vat` stage wrote for one mesh
// (vat.json, mesh.glb, the position/normal textures, vat.glsl; see docs/vat.md) and
// turns the mesh's own materials into materials whose vertex shader plays the animation.
//
//   const vat = await loadVat('baked/auto/fox/');
//   for (const p of vat.primitives) {
//     const material = vat.material(p.material, { instanced: true });
//     const mesh = new THREE.InstancedMesh(p.geometry, material, count);
//     ...
//   }
//   // per frame: vat.uniforms.vatTime.value = seconds;
//
// Each instance picks its clip through the instanced attribute `vatClip` =
// (firstFrame, frameSpan, looping, phase seconds); a non-instanced material reads
// the same vec4 from the uniform `material.userData.vatClip`. The shader computes the
// frame from the one shared `vatTime` uniform, so nothing per instance runs on the CPU.

import * as THREE from 'three';
import { GLTFLoader } from 'three/addons/loaders/GLTFLoader.js';
import { EXRLoader } from 'three/addons/loaders/EXRLoader.js';

import { decodePng16 } from './png16.js';

const SUPPORTED_ENCODINGS = ['low', 'medium', 'high', 'rgba16', 'half'];

async function fetchOk(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response;
}

// Raw data textures: no filtering (texels are addressed exactly), no mipmaps,
// no colour conversion (the bytes are numbers, not colours).
function asDataTexture(texture) {
  texture.flipY = false;
  texture.minFilter = THREE.NearestFilter;
  texture.magFilter = THREE.NearestFilter;
  texture.generateMipmaps = false;
  texture.colorSpace = THREE.NoColorSpace;
  texture.wrapS = THREE.ClampToEdgeWrapping;
  texture.wrapT = THREE.ClampToEdgeWrapping;
  texture.needsUpdate = true;
  return texture;
}

// three's EXRLoader stores rows bottom-up (file row y at memory row height-1-y, the
// OpenGL convention for images); VAT rows are addressed from the file's first row.
function flipRowsInPlace(texture) {
  const { data, width, height } = texture.image;
  const rowLength = data.length / height;
  const tmp = new data.constructor(rowLength);
  for (let top = 0, bottom = height - 1; top < bottom; top++, bottom--) {
    const a = top * rowLength;
    const b = bottom * rowLength;
    tmp.set(data.subarray(a, a + rowLength));
    data.copyWithin(a, b, b + rowLength);
    data.set(tmp, b);
  }
  if (width * 4 !== rowLength) throw new Error(`unexpected EXR layout: ${rowLength} values per ${width}-texel row`);
}

// rgba16: browsers would decode the PNG to 8 bits, so png16.js decodes it and the samples
// go up as unsigned integers (RGBA16UI), read by vat.glsl's usampler2D with texelFetch.
async function loadPng16Texture(url) {
  const { width, height, data } = await decodePng16(await (await fetchOk(url)).arrayBuffer(), url);
  const texture = new THREE.DataTexture(data, width, height, THREE.RGBAIntegerFormat, THREE.UnsignedShortType);
  texture.internalFormat = 'RGBA16UI';
  return asDataTexture(texture);
}

function loadTexture(url, encoding, { flipExrRows }) {
  if (encoding === 'rgba16') return loadPng16Texture(url);
  if (encoding === 'half') {
    const loader = new EXRLoader().setDataType(THREE.HalfFloatType);
    return loader.loadAsync(url).then((texture) => {
      if (flipExrRows) flipRowsInPlace(texture);
      return asDataTexture(texture);
    });
  }
  return new THREE.TextureLoader().loadAsync(url).then(asDataTexture);
}

function resolveUrl(base, name) {
  return new URL(name, new URL(base, document.baseURI)).href;
}

/**
 * Loads one baked mesh folder.
 * @param {string} baseUrl folder holding vat.json (a trailing slash is added if missing)
 * @param {object} [options]
 * @param {GLTFLoader} [options.gltfLoader] a loader to reuse (e.g. with a KTX2/meshopt setup)
 * @param {boolean} [options.flipExrRows=true] undo EXRLoader's bottom-up row order (`half`)
 */
export async function loadVat(baseUrl, options = {}) {
  const base = baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
  const flipExrRows = options.flipExrRows ?? true;
  const json = await (await fetchOk(resolveUrl(base, 'vat.json'))).json();
  if (json.format !== 'kiln-vat' || json.version !== 2) {
    throw new Error(`${base}vat.json: not a kiln-vat version 2 file (format ${json.format}, version ${json.version})`);
  }
  if (!SUPPORTED_ENCODINGS.includes(json.encoding)) {
    throw new Error(`${base}: unknown encoding ${json.encoding}`);
  }

  const glslName = json.shaders?.glsl ?? 'vat.glsl';
  const [glsl, gltf, textures] = await Promise.all([
    fetchOk(resolveUrl(base, glslName)).then((r) => r.text()),
    (options.gltfLoader ?? new GLTFLoader()).loadAsync(resolveUrl(base, 'mesh.glb')),
    Promise.all(json.textures.map(async (entry) => ({
      positions: await loadTexture(resolveUrl(base, entry.positions), json.encoding, { flipExrRows }),
      normals: await loadTexture(resolveUrl(base, entry.normals), json.encoding, { flipExrRows }),
    }))),
  ]);
  return new Vat(base, json, glsl, gltf, textures);
}

function boxFromJson(b) {
  return new THREE.Box3(new THREE.Vector3(...b.min), new THREE.Vector3(...b.max));
}

export class Vat {
  constructor(base, json, glsl, gltf, textures) {
    this.base = base;
    this.json = json;
    this.glsl = glsl;
    this.gltf = gltf;
    this.textures = textures;

    // Every vertex the animation can reach: rest pose and all frames.
    this.bounds = boxFromJson(json.animated_bounds ?? json.bounds);
    if (json.rest_bounds) this.bounds.union(boxFromJson(json.rest_bounds));
    const sphere = this.bounds.getBoundingSphere(new THREE.Sphere());

    // One entry per primitive of mesh.glb, in file order. Bounds are the animated ones,
    // so frustum culling (and InstancedMesh's own bounds) see the moving mesh.
    this.primitives = [];
    gltf.scene.updateMatrixWorld(true);
    gltf.scene.traverse((object) => {
      if (!object.isMesh) return;
      if (!object.matrixWorld.equals(new THREE.Matrix4())) {
        throw new Error(`${base}mesh.glb: mesh ${object.name} has a transform; VAT meshes are in model space`);
      }
      if (!object.geometry.getAttribute('uv1')) {
        throw new Error(`${base}mesh.glb: mesh ${object.name} has no TEXCOORD_1 (the VAT texel)`);
      }
      object.geometry.boundingBox = this.bounds.clone();
      object.geometry.boundingSphere = sphere.clone();
      this.primitives.push({ name: object.name, geometry: object.geometry, material: object.material, mesh: object });
    });

    // Shared by every material made here: one time for all, the VAT textures.
    this.uniforms = { vatTime: { value: 0 } };
    textures.forEach((t, i) => {
      this.uniforms[`vatPositions${i}`] = { value: t.positions };
      this.uniforms[`vatNormals${i}`] = { value: t.normals };
    });
  }

  get clips() { return this.json.clips; }

  /** A clip by name or index (numbers and numeric strings are indices). */
  clip(nameOrIndex) {
    const clips = this.json.clips;
    const byName = clips.find((c) => c.name === nameOrIndex);
    if (byName) return byName;
    const index = Number(nameOrIndex);
    if (Number.isInteger(index) && index >= 0 && index < clips.length) return clips[index];
    throw new Error(`no clip ${nameOrIndex} (clips: ${clips.map((c) => c.name).join(', ')})`);
  }

  /** Clip length in seconds (its last frame sits at the exact end). */
  clipDuration(clip) {
    return clip.duration;
  }

  /**
   * The `vatClip` vec4 of a clip: (firstFrame, frameSpan, looping, phase). Pass
   * `repeat: true` to wrap a clip that is not seamless too (it jumps back at its end).
   */
  clipVector(clip, phase = 0, { repeat = false } = {}) {
    return [clip.first_frame, clip.frame_span, clip.looping || repeat ? 1 : 0, phase];
  }

  /**
   * A copy of `source` (a three.js built-in material) whose vertex shader reads the VAT.
   * @param {THREE.Material} source
   * @param {object} [options]
   * @param {boolean} [options.instanced=false] read `vatClip` per instance (an instanced
   *   vec4 attribute of the geometry) instead of from the uniform `material.userData.vatClip`
   * @param {boolean} [options.interpolate=true] blend between frames (VAT_INTERPOLATE)
   * @param {string} [options.chunk] shader chunk to use instead of the baked vat.glsl
   * @param {number[]} [options.texelOffset] [columns, rows] added to the texel (for tests
   *   that must see a wrong address fail)
   */
  material(source, options = {}) {
    const material = source.clone();
    const instanced = options.instanced ?? false;
    const interpolate = options.interpolate ?? true;
    const chunk = options.chunk ?? this.glsl;
    const [dx, dy] = options.texelOffset ?? [0, 0];
    const { width, rows_per_frame: rows } = this.json.layout;
    const texel = dx || dy ? `(uv1 + vec2(${(dx / width).toFixed(9)}, ${(dy / rows).toFixed(9)}))` : 'uv1';

    const uniforms = { ...this.uniforms };
    if (!instanced) {
      material.userData.vatClip = { value: new THREE.Vector4(0, 1, 0, 0) };
      uniforms.vatClip = material.userData.vatClip;
    }
    const header = [
      interpolate ? '#define VAT_INTERPOLATE' : '',
      // three declares uv1 only when a texture of the material uses channel 1.
      '#ifndef USE_UV1',
      'attribute vec2 uv1;',
      '#endif',
      instanced ? 'attribute vec4 vatClip;' : 'uniform vec4 vatClip;',
      'uniform float vatTime;',
      chunk,
    ].join('\n');
    // Keep what the stock chunks do besides reading position/normal (alpha hash, tangents).
    const beginVertex = THREE.ShaderChunk.begin_vertex.replace(
      'vec3 transformed = vec3( position );', `vec3 transformed = vatPosition(${texel}, position, vatF);`);
    const beginNormal = THREE.ShaderChunk.beginnormal_vertex.replace(
      'vec3 objectNormal = vec3( normal );', `vec3 objectNormal = vatNormal(${texel}, vatF);`);
    if (!beginVertex.includes('vatPosition') || !beginNormal.includes('vatNormal')) {
      throw new Error('this three.js version has different begin_vertex/beginnormal_vertex chunks');
    }

    material.onBeforeCompile = (shader) => {
      Object.assign(shader.uniforms, uniforms);
      const mainRe = /void\s+main\s*\(\s*\)\s*\{/;
      if (!mainRe.test(shader.vertexShader)) throw new Error('vertex shader has no main()');
      shader.vertexShader = shader.vertexShader
        .replace(mainRe, `${header}\nvoid main() {\n\tVatFrame vatF = vatFrame(vatClip.x, vatClip.y, vatClip.z, vatTime + vatClip.w);`)
        .replace('#include <begin_vertex>', beginVertex)
        .replace('#include <beginnormal_vertex>', beginNormal);
    };
    // Programs differ by these options (and the chunk), not by the source material's code.
    const key = `kiln-vat:${this.base}:${instanced}:${interpolate}:${dx},${dy}:${chunk.length}:${hashString(chunk)}`;
    material.customProgramCacheKey = () => key;
    return material;
  }
}

function hashString(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return (h >>> 0).toString(16);
}
