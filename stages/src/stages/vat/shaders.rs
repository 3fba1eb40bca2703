//! The decoders shipped beside each bake: a GLSL ES 3.0 chunk (three.js `onBeforeCompile` or
//! `ShaderMaterial`) and a WGSL module, with this mesh's layout and bounds as constants.
//! Both follow `docs/vat.md`; the tests parse and validate them with naga.

use std::fmt::Write;

use super::{PositionMode, VatEncoding, VatMeta};

fn vec3(v: [f32; 3]) -> String {
    format!("{:?}, {:?}, {:?}", v[0], v[1], v[2])
}

fn header(meta: &VatMeta, comment: &str) -> String {
    format!(
        "{comment} Kiln VAT decoder (kiln-vat {}) for mesh {:?} of {}: encoding {}, mode {}.\n\
         {comment} {} vertices, {} frames at {} fps in {} texture(s); see vat.json.\n",
        meta.version,
        meta.mesh,
        meta.source,
        meta.encoding.name(),
        match meta.mode {
            PositionMode::Absolute => "absolute",
            PositionMode::Relative => "relative",
        },
        meta.vertices,
        meta.frames,
        meta.frame_rate,
        meta.textures.len(),
    )
}

/// The GLSL chunk: uniforms, constants and `vatFrame` / `vatPosition` / `vatNormal`.
pub fn glsl(meta: &VatMeta) -> String {
    let l = &meta.layout;
    let range = [0, 1, 2].map(|a| meta.bounds.max[a] - meta.bounds.min[a]);
    let integer = meta.encoding == VatEncoding::Rgba16;
    let (sampler, texel) = if integer {
        ("usampler2D", "uvec4")
    } else {
        ("sampler2D", "vec4")
    };
    let mut s = header(meta, "//");
    let _ = write!(
        s,
        "// Define VAT_INTERPOLATE before this chunk to blend between frames.\n\
         #define VAT_WIDTH {}\n#define VAT_ROWS {}\n#define VAT_FRAMES_PER_TEXTURE {}\n\
         #define VAT_FRAMES {}\n#define VAT_FPS {:?}\n\
         const vec3 VAT_MIN = vec3({});\nconst vec3 VAT_RANGE = vec3({});\n",
        l.width,
        l.rows_per_frame,
        l.frames_per_texture,
        meta.frames,
        meta.frame_rate,
        vec3(meta.bounds.min),
        vec3(range),
    );
    let count = meta.textures.len();
    for i in 0..count {
        let _ = writeln!(s, "uniform {sampler} vatPositions{i};");
        let _ = writeln!(s, "uniform {sampler} vatNormals{i};");
    }
    s.push_str(
        "\nstruct VatFrame { int a; int b; float t; };\n\n\
         // Frames `a` and `b` (absolute) and the blend between them, `time` s into a clip that\n\
         // starts at `firstFrame` and ends `frameSpan` frames later (vat.json: first_frame,\n\
         // frame_span); the last frame sits at the exact end, so loops keep the clip's length.\n\
         VatFrame vatFrame(float firstFrame, float frameSpan, float looping, float time) {\n\
         \x20 float f = time * VAT_FPS;\n\
         \x20 f = (looping > 0.5 && frameSpan > 0.0) ? mod(f, frameSpan) : clamp(f, 0.0, frameSpan);\n\
         \x20 float last = ceil(frameSpan - 0.001);\n\
         \x20 float a = min(floor(f), last);\n\
         \x20 float b = min(a + 1.0, last);\n\
         \x20 VatFrame r;\n\
         \x20 r.a = int(firstFrame + a);\n\
         \x20 r.b = int(firstFrame + b);\n\
         #ifdef VAT_INTERPOLATE\n\
         \x20 r.t = b > a ? clamp((f - a) / (min(b, frameSpan) - a), 0.0, 1.0) : 0.0;\n\
         #else\n\
         \x20 r.t = 0.0;\n\
         #endif\n\
         \x20 return r;\n\
         }\n\n",
    );
    for (kind, name) in [
        ("Positions", "vatFetchPositions"),
        ("Normals", "vatFetchNormals"),
    ] {
        let _ = writeln!(s, "{texel} {name}(int i, ivec2 p) {{");
        for i in 0..count - 1 {
            let _ = writeln!(s, "  if (i == {i}) return texelFetch(vat{kind}{i}, p, 0);");
        }
        let _ = writeln!(
            s,
            "  return texelFetch(vat{kind}{}, p, 0);\n}}\n",
            count - 1
        );
    }
    s.push_str(
        "ivec2 vatTexel(vec2 uv) { return ivec2(uv * vec2(float(VAT_WIDTH), float(VAT_ROWS))); }\n\n",
    );
    // Format 2: planes, then vertex rows, then frames: vertex row r of local frame l is row
    // r × n + l of plane 0 (n: frames in this texture), plane p is p × VAT_ROWS × n rows
    // further down.
    s.push_str(
        "vec3 vatValue(ivec2 texel, int frame) {\n\
         \x20 int i = frame / VAT_FRAMES_PER_TEXTURE;\n\
         \x20 int n = min(VAT_FRAMES_PER_TEXTURE, VAT_FRAMES - i * VAT_FRAMES_PER_TEXTURE);\n\
         \x20 int y = texel.y * n + (frame - i * VAT_FRAMES_PER_TEXTURE);\n\
         \x20 int plane = VAT_ROWS * n;\n",
    );
    s.push_str(match meta.encoding {
        VatEncoding::Low => {
            "  vec3 t = vatFetchPositions(i, ivec2(texel.x, y)).rgb;\n\
             \x20 return VAT_MIN + t * VAT_RANGE;\n"
        }
        VatEncoding::Medium => {
            "  vec3 hi = floor(vatFetchPositions(i, ivec2(texel.x, y)).rgb * 255.0 + 0.5);\n\
             \x20 vec3 lo = floor(vatFetchPositions(i, ivec2(texel.x, y + plane)).rgb * 255.0 + 0.5);\n\
             \x20 return VAT_MIN + ((hi * 256.0 + lo) / 65535.0) * VAT_RANGE;\n"
        }
        VatEncoding::High => {
            "  vec3 b2 = floor(vatFetchPositions(i, ivec2(texel.x, y)).rgb * 255.0 + 0.5);\n\
             \x20 vec3 b1 = floor(vatFetchPositions(i, ivec2(texel.x, y + plane)).rgb * 255.0 + 0.5);\n\
             \x20 vec3 b0 = floor(vatFetchPositions(i, ivec2(texel.x, y + 2 * plane)).rgb * 255.0 + 0.5);\n\
             \x20 return VAT_MIN + ((b2 * 65536.0 + b1 * 256.0 + b0) / 16777215.0) * VAT_RANGE;\n"
        }
        VatEncoding::Rgba16 => {
            "  vec3 t = vec3(vatFetchPositions(i, ivec2(texel.x, y)).rgb) / 65535.0;\n\
             \x20 return VAT_MIN + t * VAT_RANGE;\n"
        }
        VatEncoding::Half => "  return vatFetchPositions(i, ivec2(texel.x, y)).rgb;\n",
    });
    s.push_str("}\n\n");
    let _ = write!(
        s,
        "// Model-space position; `rest` is the mesh's POSITION.\n\
         vec3 vatPosition(vec2 uv, vec3 rest, VatFrame f) {{\n\
         \x20 ivec2 texel = vatTexel(uv);\n\
         \x20 vec3 v = vatValue(texel, f.a);\n\
         #ifdef VAT_INTERPOLATE\n\
         \x20 v = mix(v, vatValue(texel, f.b), f.t);\n\
         #endif\n\
         \x20 return {};\n}}\n\n",
        match meta.mode {
            PositionMode::Absolute => "v",
            PositionMode::Relative => "rest + v",
        }
    );
    s.push_str(
        "vec3 vatOctahedral(vec2 o) {\n\
         \x20 vec3 n = vec3(o, 1.0 - abs(o.x) - abs(o.y));\n\
         \x20 if (n.z < 0.0) {\n\
         \x20   vec2 s = vec2(n.x >= 0.0 ? 1.0 : -1.0, n.y >= 0.0 ? 1.0 : -1.0);\n\
         \x20   n.xy = (1.0 - abs(n.yx)) * s;\n\
         \x20 }\n\
         \x20 return normalize(n);\n\
         }\n\n\
         vec3 vatNormalAt(ivec2 texel, int frame) {\n\
         \x20 int i = frame / VAT_FRAMES_PER_TEXTURE;\n\
         \x20 int n = min(VAT_FRAMES_PER_TEXTURE, VAT_FRAMES - i * VAT_FRAMES_PER_TEXTURE);\n\
         \x20 int y = texel.y * n + (frame - i * VAT_FRAMES_PER_TEXTURE);\n",
    );
    s.push_str(match meta.encoding {
        VatEncoding::Low | VatEncoding::Medium | VatEncoding::High => {
            "  vec3 c = floor(vatFetchNormals(i, ivec2(texel.x, y)).rgb * 255.0 + 0.5);\n\
             \x20 float hi = floor(c.g / 16.0);\n\
             \x20 vec2 o = vec2(c.r * 16.0 + hi, (c.g - hi * 16.0) * 256.0 + c.b) / 4095.0 * 2.0 - 1.0;\n"
        }
        VatEncoding::Rgba16 => {
            "  vec2 o = vec2(vatFetchNormals(i, ivec2(texel.x, y)).rg) / 65535.0 * 2.0 - 1.0;\n"
        }
        VatEncoding::Half => "  vec2 o = vatFetchNormals(i, ivec2(texel.x, y)).rg;\n",
    });
    s.push_str(
        "  return vatOctahedral(o);\n}\n\n\
         // Model-space unit normal.\n\
         vec3 vatNormal(vec2 uv, VatFrame f) {\n\
         \x20 ivec2 texel = vatTexel(uv);\n\
         \x20 vec3 n = vatNormalAt(texel, f.a);\n\
         #ifdef VAT_INTERPOLATE\n\
         \x20 n = normalize(mix(n, vatNormalAt(texel, f.b), f.t));\n\
         #endif\n\
         \x20 return n;\n}\n",
    );
    s
}

/// The WGSL module: bindings, constants and `vat_frame` / `vat_position` / `vat_normal`.
pub fn wgsl(meta: &VatMeta) -> String {
    let l = &meta.layout;
    let range = [0, 1, 2].map(|a| meta.bounds.max[a] - meta.bounds.min[a]);
    let (texture, scalar) = if meta.encoding == VatEncoding::Rgba16 {
        ("texture_2d<u32>", "vec4<u32>")
    } else {
        ("texture_2d<f32>", "vec4<f32>")
    };
    let count = meta.textures.len();
    let mut s = header(meta, "//");
    let _ = writeln!(
        s,
        "// Bindings (group 0): vat_positions_i at binding 2i, vat_normals_i at 2i + 1.\n\
         // Pass `interpolate = true` to vat_frame to blend between frames."
    );
    for i in 0..count {
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var vat_positions_{i}: {texture};\n\
             @group(0) @binding({}) var vat_normals_{i}: {texture};",
            2 * i,
            2 * i + 1
        );
    }
    let _ = write!(
        s,
        "\nconst VAT_WIDTH: i32 = {};\nconst VAT_ROWS: i32 = {};\n\
         const VAT_FRAMES_PER_TEXTURE: i32 = {};\nconst VAT_FRAMES: i32 = {};\nconst VAT_FPS: f32 = {:?};\n\
         const VAT_MIN: vec3<f32> = vec3<f32>({});\nconst VAT_RANGE: vec3<f32> = vec3<f32>({});\n\n",
        l.width,
        l.rows_per_frame,
        l.frames_per_texture,
        meta.frames,
        meta.frame_rate,
        vec3(meta.bounds.min),
        vec3(range),
    );
    s.push_str(
        "struct VatFrame { a: i32, b: i32, t: f32 }\n\n\
         // As vatFrame in vat.glsl; `frame_span` is the clip's vat.json frame_span.\n\
         fn vat_frame(first_frame: f32, frame_span: f32, looping: bool, time: f32, interpolate: bool) -> VatFrame {\n\
         \x20 let g = time * VAT_FPS;\n\
         \x20 var f = clamp(g, 0.0, frame_span);\n\
         \x20 if (looping && frame_span > 0.0) {\n\
         \x20   f = g - frame_span * floor(g / frame_span);\n\
         \x20 }\n\
         \x20 let last = ceil(frame_span - 0.001);\n\
         \x20 let a = min(floor(f), last);\n\
         \x20 let b = min(a + 1.0, last);\n\
         \x20 var r: VatFrame;\n\
         \x20 r.a = i32(first_frame + a);\n\
         \x20 r.b = i32(first_frame + b);\n\
         \x20 let blend = clamp((f - a) / max(min(b, frame_span) - a, 1e-6), 0.0, 1.0);\n\
         \x20 r.t = select(0.0, blend, interpolate && b > a);\n\
         \x20 return r;\n\
         }\n\n",
    );
    for (kind, name) in [
        ("positions", "vat_fetch_positions"),
        ("normals", "vat_fetch_normals"),
    ] {
        let _ = writeln!(s, "fn {name}(i: i32, p: vec2<i32>) -> {scalar} {{");
        for i in 0..count - 1 {
            let _ = writeln!(
                s,
                "  if (i == {i}) {{ return textureLoad(vat_{kind}_{i}, p, 0); }}"
            );
        }
        let _ = writeln!(
            s,
            "  return textureLoad(vat_{kind}_{}, p, 0);\n}}\n",
            count - 1
        );
    }
    s.push_str(
        "fn vat_texel(uv: vec2<f32>) -> vec2<i32> {\n\
         \x20 return vec2<i32>(uv * vec2<f32>(f32(VAT_WIDTH), f32(VAT_ROWS)));\n}\n\n",
    );
    s.push_str(
        "fn vat_value(texel: vec2<i32>, frame: i32) -> vec3<f32> {\n\
         \x20 let i = frame / VAT_FRAMES_PER_TEXTURE;\n\
         \x20 let n = min(VAT_FRAMES_PER_TEXTURE, VAT_FRAMES - i * VAT_FRAMES_PER_TEXTURE);\n\
         \x20 let y = texel.y * n + (frame - i * VAT_FRAMES_PER_TEXTURE);\n\
         \x20 let plane = VAT_ROWS * n;\n",
    );
    s.push_str(match meta.encoding {
        VatEncoding::Low => {
            "  let t = vat_fetch_positions(i, vec2<i32>(texel.x, y)).rgb;\n\
             \x20 return VAT_MIN + t * VAT_RANGE;\n"
        }
        VatEncoding::Medium => {
            "  let hi = floor(vat_fetch_positions(i, vec2<i32>(texel.x, y)).rgb * 255.0 + 0.5);\n\
             \x20 let lo = floor(vat_fetch_positions(i, vec2<i32>(texel.x, y + plane)).rgb * 255.0 + 0.5);\n\
             \x20 return VAT_MIN + ((hi * 256.0 + lo) / 65535.0) * VAT_RANGE;\n"
        }
        VatEncoding::High => {
            "  let b2 = floor(vat_fetch_positions(i, vec2<i32>(texel.x, y)).rgb * 255.0 + 0.5);\n\
             \x20 let b1 = floor(vat_fetch_positions(i, vec2<i32>(texel.x, y + plane)).rgb * 255.0 + 0.5);\n\
             \x20 let b0 = floor(vat_fetch_positions(i, vec2<i32>(texel.x, y + 2 * plane)).rgb * 255.0 + 0.5);\n\
             \x20 return VAT_MIN + ((b2 * 65536.0 + b1 * 256.0 + b0) / 16777215.0) * VAT_RANGE;\n"
        }
        VatEncoding::Rgba16 => {
            "  let t = vec3<f32>(vat_fetch_positions(i, vec2<i32>(texel.x, y)).rgb) / 65535.0;\n\
             \x20 return VAT_MIN + t * VAT_RANGE;\n"
        }
        VatEncoding::Half => "  return vat_fetch_positions(i, vec2<i32>(texel.x, y)).rgb;\n",
    });
    s.push_str("}\n\n");
    let _ = write!(
        s,
        "// Model-space position; `rest` is the mesh's POSITION.\n\
         fn vat_position(uv: vec2<f32>, rest: vec3<f32>, f: VatFrame) -> vec3<f32> {{\n\
         \x20 let texel = vat_texel(uv);\n\
         \x20 let v = mix(vat_value(texel, f.a), vat_value(texel, f.b), f.t);\n\
         \x20 return {};\n}}\n\n",
        match meta.mode {
            PositionMode::Absolute => "v",
            PositionMode::Relative => "rest + v",
        }
    );
    s.push_str(
        "fn vat_octahedral(o: vec2<f32>) -> vec3<f32> {\n\
         \x20 var n = vec3<f32>(o, 1.0 - abs(o.x) - abs(o.y));\n\
         \x20 if (n.z < 0.0) {\n\
         \x20   let s = select(vec2<f32>(-1.0), vec2<f32>(1.0), n.xy >= vec2<f32>(0.0));\n\
         \x20   n = vec3<f32>((1.0 - abs(n.yx)) * s, n.z);\n\
         \x20 }\n\
         \x20 return normalize(n);\n\
         }\n\n\
         fn vat_normal_at(texel: vec2<i32>, frame: i32) -> vec3<f32> {\n\
         \x20 let i = frame / VAT_FRAMES_PER_TEXTURE;\n\
         \x20 let n = min(VAT_FRAMES_PER_TEXTURE, VAT_FRAMES - i * VAT_FRAMES_PER_TEXTURE);\n\
         \x20 let y = texel.y * n + (frame - i * VAT_FRAMES_PER_TEXTURE);\n",
    );
    s.push_str(match meta.encoding {
        VatEncoding::Low | VatEncoding::Medium | VatEncoding::High => {
            "  let c = floor(vat_fetch_normals(i, vec2<i32>(texel.x, y)).rgb * 255.0 + 0.5);\n\
             \x20 let hi = floor(c.g / 16.0);\n\
             \x20 let o = vec2<f32>(c.r * 16.0 + hi, (c.g - hi * 16.0) * 256.0 + c.b) / 4095.0 * 2.0 - 1.0;\n"
        }
        VatEncoding::Rgba16 => {
            "  let o = vec2<f32>(vat_fetch_normals(i, vec2<i32>(texel.x, y)).rg) / 65535.0 * 2.0 - 1.0;\n"
        }
        VatEncoding::Half => "  let o = vat_fetch_normals(i, vec2<i32>(texel.x, y)).rg;\n",
    });
    s.push_str(
        "  return vat_octahedral(o);\n}\n\n\
         // Model-space unit normal.\n\
         fn vat_normal(uv: vec2<f32>, f: VatFrame) -> vec3<f32> {\n\
         \x20 let texel = vat_texel(uv);\n\
         \x20 return normalize(mix(vat_normal_at(texel, f.a), vat_normal_at(texel, f.b), f.t));\n}\n",
    );
    s
}
