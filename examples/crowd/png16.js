// A minimal PNG decoder for Kiln's `rgba16` VAT textures (docs/vat.md): browsers decode
// every PNG to 8 bits per channel (<img>, createImageBitmap), which would drop the low
// byte of each 16-bit sample, so the file is parsed here. Only what the baker writes is
// accepted: bit depth 16, colour type 6 (RGBA), no interlace. No three.js, no DOM: it
// runs in the browser and in Node 18+ (both have DecompressionStream).

const SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const BPP = 8; // bytes per pixel: 4 channels x 2 bytes; filters look this far back

/**
 * @param {ArrayBuffer|Uint8Array} buffer the PNG file
 * @param {string} [name] for error messages (the URL)
 * @returns {Promise<{width: number, height: number, data: Uint16Array}>} RGBA samples,
 *   row 0 = the file's first row
 */
export async function decodePng16(buffer, name = 'PNG') {
  const fail = (message) => { throw new Error(`${name}: ${message}`); };
  const bytes = buffer instanceof Uint8Array ? buffer : new Uint8Array(buffer);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 8 || SIGNATURE.some((b, i) => bytes[i] !== b)) fail('not a PNG file (bad signature)');

  // Chunks: length, type, data, CRC. CRCs are not checked: zlib's Adler-32 covers the
  // pixel data, and a damaged header fails the checks below.
  let width = 0;
  let height = 0;
  const idat = [];
  for (let pos = 8; ;) {
    if (pos + 12 > bytes.length) fail('truncated (no IEND chunk)');
    const length = view.getUint32(pos);
    const type = String.fromCharCode(...bytes.subarray(pos + 4, pos + 8));
    const start = pos + 8;
    if (start + length + 4 > bytes.length) fail(`truncated ${type} chunk`);
    if (type === 'IEND') break;
    if (type === 'IHDR') {
      if (length !== 13) fail(`IHDR of ${length} bytes`);
      width = view.getUint32(start);
      height = view.getUint32(start + 4);
      const [depth, colour, compression, filter, interlace] = bytes.subarray(start + 8, start + 13);
      if (depth !== 16 || colour !== 6) fail(`bit depth ${depth}, colour type ${colour}; rgba16 needs 16-bit RGBA (depth 16, colour type 6)`);
      if (compression !== 0 || filter !== 0) fail(`unknown compression ${compression} / filter method ${filter}`);
      if (interlace !== 0) fail('interlaced PNGs are not supported');
      if (!width || !height) fail(`empty image ${width}x${height}`);
    } else if (type === 'IDAT') {
      if (!width) fail('IDAT before IHDR');
      idat.push(bytes.subarray(start, start + length));
    }
    pos = start + length + 4;
  }
  if (!width) fail('no IHDR chunk');
  if (!idat.length) fail('no IDAT chunk');

  // The IDATs together are one zlib stream ('deflate' = zlib-wrapped in the Compression
  // Streams spec). A cut or corrupt stream rejects, with a message that varies by browser
  // (Chromium: "Failed to fetch"), so say what it means.
  let raw;
  try {
    const stream = new Blob(idat).stream().pipeThrough(new DecompressionStream('deflate'));
    raw = new Uint8Array(await new Response(stream).arrayBuffer());
  } catch (e) {
    fail(`image data does not inflate: truncated or corrupt zlib stream (${e.message})`);
  }
  const stride = width * BPP;
  if (raw.length < height * (stride + 1)) fail(`truncated image data: ${raw.length} bytes, ${width}x${height} needs ${height * (stride + 1)}`);

  // Undo the per-row filters in place (each row: filter byte, then `stride` bytes);
  // a = byte one pixel left, b = byte above, c = above-left, all already unfiltered.
  for (let y = 0; y < height; y++) {
    const row = y * (stride + 1) + 1;
    const up = row - (stride + 1);
    const filter = raw[row - 1];
    if (filter > 4) fail(`row ${y}: unknown filter type ${filter}`);
    for (let x = 0; x < stride; x++) {
      const a = x >= BPP ? raw[row + x - BPP] : 0;
      const b = y > 0 ? raw[up + x] : 0;
      const c = x >= BPP && y > 0 ? raw[up + x - BPP] : 0;
      let predictor = 0;
      if (filter === 1) predictor = a;
      else if (filter === 2) predictor = b;
      else if (filter === 3) predictor = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a);
        const pb = Math.abs(p - b);
        const pc = Math.abs(p - c);
        predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      raw[row + x] = (raw[row + x] + predictor) & 0xff;
    }
  }

  // PNG samples are big-endian; a Uint16Array is in the platform's order (little-endian
  // everywhere WebGL runs), so assemble each value rather than reinterpret the bytes.
  const data = new Uint16Array(width * height * 4);
  for (let y = 0, i = 0; y < height; y++) {
    const row = y * (stride + 1) + 1;
    for (let x = 0; x < stride; x += 2) data[i++] = (raw[row + x] << 8) | raw[row + x + 1];
  }
  return { width, height, data };
}
