#!/usr/bin/env node
// Static file server for this folder (the page, node_modules/three, baked/), no dependencies.
//
//   node serve.mjs [PORT]        (or PORT=8080 node serve.mjs; 0 = any free port;
//                                 HOST=0.0.0.0 to serve other machines)
//
// Prints the page URL as the first line on stdout (crowd-perf.mjs reads it).

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.dirname(fileURLToPath(import.meta.url));

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.css': 'text/css',
  '.glb': 'model/gltf-binary',
  '.gltf': 'model/gltf+json',
  '.bin': 'application/octet-stream',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.exr': 'image/x-exr',
  '.glsl': 'text/plain; charset=utf-8',
  '.wgsl': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
};

const server = http.createServer((req, res) => {
  const urlPath = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
  let file = path.join(root, path.normalize(urlPath));
  // path.join + normalize keeps '..' from leaving the folder; check anyway.
  if (file !== root && !file.startsWith(root + path.sep)) {
    res.writeHead(403).end();
    return;
  }
  if (urlPath.endsWith('/')) file = path.join(file, 'index.html');
  fs.stat(file, (err, stat) => {
    if (err || !stat.isFile()) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`not found: ${urlPath}\n`);
      return;
    }
    res.writeHead(200, {
      'content-type': TYPES[path.extname(file).toLowerCase()] ?? 'application/octet-stream',
      'content-length': stat.size,
      // Re-baked files must show on reload.
      'cache-control': 'no-cache',
    });
    if (req.method === 'HEAD') res.end();
    else fs.createReadStream(file).pipe(res);
  });
});

const port = Number(process.argv[2] ?? process.env.PORT ?? 8080);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`usage: node serve.mjs [PORT]   (bad port ${process.argv[2] ?? process.env.PORT})`);
  process.exit(2);
}
const host = process.env.HOST ?? '127.0.0.1';
server.listen(port, host, () => {
  console.log(`http://${host}:${server.address().port}/`);
});
