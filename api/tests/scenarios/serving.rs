//! Serving games fast: connections that don't wait for delayed ACKs, `/play/` from a cached
//! manifest, build-scoped immutable `/play/{game}/@{build}/` URLs, the loader compressed and
//! content-addressed, and `Timing-Allow-Origin` for Resource Timing.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

/// A small game whose files are all text (so each has brotli and gzip forms).
fn small_game(marker: &str) -> Vec<u8> {
    let script = format!(
        "export const build = '{marker}';\n{}",
        "export function tick(t) { return Math.sin(t) * 42; }\n".repeat(200)
    );
    let page = format!(
        "<!doctype html><html><head><script type=\"module\" src=\"main.js\"></script></head>\
         <body>{marker}</body></html>"
    );
    zip_with(&[
        ("index.html", page.as_bytes()),
        ("main.js", script.as_bytes()),
        ("tiny.txt", b"ok\n"),
    ])
}

/// One raw HTTP/1.1 response read off a keep-alive connection: status line and headers
/// (lower-cased names) and the body, by its `Content-Length`.
async fn read_response(
    stream: &mut tokio::net::TcpStream,
) -> (String, Vec<(String, String)>, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed mid-response");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .expect("a Content-Length (no chunked bodies here)");
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed mid-body");
        body.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(
        body.len(),
        length,
        "nothing after the body on a sequential connection"
    );
    (status, headers, body)
}

/// Median time of `n` sequential GETs of `path` on one kept-alive connection, each time, and
/// whether the server's end of the connection has TCP_NODELAY.
async fn keep_alive_median(kiln: &Kiln, path: &str, n: usize) -> (Duration, Vec<Duration>, bool) {
    let addr = kiln.content.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // The client sends each request in one write without waiting: only the server's
    // writes are under test.
    stream.set_nodelay(true).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept-Encoding: br\r\n\r\n");
    let mut times = Vec::new();
    for _ in 0..n {
        let start = Instant::now();
        stream.write_all(request.as_bytes()).await.unwrap();
        let (status, _, body) = read_response(&mut stream).await;
        times.push(start.elapsed());
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert!(!body.is_empty());
    }
    let nodelay = server_side_nodelay(&stream);
    let mut sorted = times.clone();
    sorted.sort();
    (sorted[n / 2], times, nodelay)
}

/// Whether the server's end of the connection whose client end is `client` has TCP_NODELAY.
/// The server runs in this process, so its socket is one of our file descriptors. This
/// check is exact where the timing alone is not: whether hyper writes a response's head and
/// body apart, and whether the client delays its ACK, both depend on timing, so without
/// TCP_NODELAY some runs still see few slow responses.
fn server_side_nodelay(client: &tokio::net::TcpStream) -> bool {
    use std::os::fd::BorrowedFd;
    let (local, peer) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(fd) = entry.unwrap().file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: borrowed only for the getsockname/getpeername/getsockopt calls below; a
        // descriptor another thread closes meanwhile makes them fail (EBADF), and one reused
        // meanwhile names another socket, which the address check skips.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        let (Ok(l), Ok(p)) = (socket.local_addr(), socket.peer_addr()) else {
            continue;
        };
        if l.as_socket() == Some(peer) && p.as_socket() == Some(local) {
            return socket.tcp_nodelay().unwrap();
        }
    }
    panic!("no server socket for the connection from {local}");
}

/// Sequential requests on one keep-alive connection are answered at once. Without
/// TCP_NODELAY, a response written as headers + body waits for the client's delayed ACK of
/// the headers before the body goes out (Nagle): 40 ms or more per request on Linux.
pub async fn keep_alive_responses_do_not_wait_for_delayed_acks(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("nodelay").await;
    let build = kiln
        .publish(&token, "nodelay-game", "1", small_game("a"))
        .await;
    let manifest = super::library::live_manifest(&kiln, "nodelay-game").await;
    let key = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "main.js")
        .unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    // The threshold is safe on a busy machine: it is the median of 9 requests (a few slow
    // ones from scheduling don't move it), a local request takes well under a millisecond
    // to a few, and the delayed ACK it guards against is never shorter than Linux's 40 ms
    // minimum (TCP_DELACK_MIN), so every request that waits for one is over 40 ms.
    for path in [
        format!("/cdn/{key}"),
        "/play/nodelay-game/main.js".to_string(),
        format!("/play/nodelay-game/@{build}/main.js"),
    ] {
        let (median, times, nodelay) = keep_alive_median(&kiln, &path, 9).await;
        eprintln!("{path}: median {median:?} of {times:?}; server TCP_NODELAY {nodelay}");
        assert!(
            median < Duration::from_millis(20),
            "{path}: median {median:?} per keep-alive request ({times:?}): responses wait for delayed ACKs"
        );
        assert!(
            nodelay,
            "{path}: the server's end of the connection has TCP_NODELAY"
        );
    }
    kiln.stop().await;
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or("")
}

/// `/play/{game}/…` serves the live build (HTML and the rest for a minute) from a
/// manifest read once; `/play/{game}/@{build}/…` serves any published build of the game
/// forever (`immutable`), with the CDN's ETags, 304s, ranges and encodings.
pub async fn play_serves_live_and_build_scoped_files(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("play").await;
    let (_, other_token) = kiln.team("play-other").await;
    let v1 = kiln
        .publish(&token, "play-game", "1", small_game("one"))
        .await;
    let v2 = kiln
        .publish(&token, "play-game", "2", small_game("two"))
        .await;
    let other = kiln
        .publish(&other_token, "play-other", "1", small_game("other"))
        .await;
    let get = |path: String, headers: &[(&str, &str)]| {
        let mut request = kiln.http.get(format!("{}{path}", kiln.content));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.send()
    };

    // The live build: pages revalidate every visit, other files keep a short max-age.
    let page = get("/play/play-game/".into(), &[]).await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(
        header(&page, "cache-control"),
        kiln_api::routes::cdn::LIVE_PAGE
    );
    assert_eq!(header(&page, "timing-allow-origin"), "*");
    assert!(header(&page, "content-type").starts_with("text/html"));
    let page_etag = header(&page, "etag").to_string();
    assert!(page.text().await.unwrap().contains("two"));
    let revalidated = get(
        "/play/play-game/index.html".into(),
        &[("if-none-match", &page_etag)],
    )
    .await
    .unwrap();
    assert_eq!(revalidated.status(), 304);
    assert_eq!(
        header(&revalidated, "cache-control"),
        kiln_api::routes::cdn::LIVE_PAGE
    );
    let script = get("/play/play-game/main.js".into(), &[]).await.unwrap();
    assert_eq!(script.status(), 200);
    assert_eq!(header(&script, "cache-control"), "public, max-age=60");
    assert_eq!(header(&script, "timing-allow-origin"), "*");
    assert!(script.text().await.unwrap().contains("'two'"));

    // Build-scoped: the exact build, cached forever, any published build of the game.
    for (build, marker) in [(&v1, "one"), (&v2, "two")] {
        let page = get(format!("/play/play-game/@{build}/"), &[])
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "{build}");
        assert_eq!(
            header(&page, "cache-control"),
            "public, max-age=31536000, immutable"
        );
        assert_eq!(header(&page, "timing-allow-origin"), "*");
        assert!(page.text().await.unwrap().contains(marker));
        let script = get(format!("/play/play-game/@{build}/main.js"), &[])
            .await
            .unwrap();
        assert_eq!(script.status(), 200);
        assert_eq!(
            header(&script, "cache-control"),
            "public, max-age=31536000, immutable"
        );
        assert!(
            script
                .text()
                .await
                .unwrap()
                .contains(&format!("'{marker}'"))
        );
    }
    // The same ETag, 304, range and encoding handling as /cdn.
    let manifest: Value = get("/v1/games/play-game/manifest".into(), &[])
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let file = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "main.js")
        .unwrap()
        .clone();
    let size = file["size"].as_u64().unwrap();
    let scoped = format!("/play/play-game/@{v2}/main.js");
    let full = get(scoped.clone(), &[]).await.unwrap();
    let etag = header(&full, "etag").to_string();
    assert_eq!(etag, format!("\"{}\"", file["sha256"].as_str().unwrap()));
    assert_eq!(header(&full, "accept-ranges"), "bytes");
    assert_eq!(header(&full, "vary"), "Accept-Encoding");
    assert_eq!(header(&full, "content-length"), size.to_string());
    assert!(header(&full, "content-type").starts_with("text/javascript"));
    let body = full.bytes().await.unwrap();
    let cdn = get(format!("/cdn/{}", file["key"].as_str().unwrap()), &[])
        .await
        .unwrap();
    assert_eq!(header(&cdn, "etag"), etag);
    assert_eq!(header(&cdn, "timing-allow-origin"), "*");
    assert_eq!(cdn.bytes().await.unwrap(), body);
    let not_modified = get(scoped.clone(), &[("if-none-match", &etag)])
        .await
        .unwrap();
    assert_eq!(not_modified.status(), 304);
    assert_eq!(header(&not_modified, "etag"), etag);
    assert_eq!(
        header(&not_modified, "cache-control"),
        "public, max-age=31536000, immutable"
    );
    let partial = get(scoped.clone(), &[("range", "bytes=10-99")])
        .await
        .unwrap();
    assert_eq!(partial.status(), 206);
    assert_eq!(
        header(&partial, "content-range"),
        format!("bytes 10-99/{size}")
    );
    assert_eq!(&partial.bytes().await.unwrap()[..], &body[10..100]);
    let unsatisfiable = get(
        scoped.clone(),
        &[("range", &format!("bytes={}-", size + 1))],
    )
    .await
    .unwrap();
    assert_eq!(unsatisfiable.status(), 416);
    assert_eq!(
        header(&unsatisfiable, "content-range"),
        format!("bytes */{size}")
    );
    for (accept, token, suffix) in [
        ("gzip, deflate, br", "br", "-br"),
        ("gzip", "gzip", "-gzip"),
    ] {
        let encoded = get(scoped.clone(), &[("accept-encoding", accept)])
            .await
            .unwrap();
        assert_eq!(encoded.status(), 200);
        assert_eq!(header(&encoded, "content-encoding"), token);
        let encoded_etag = header(&encoded, "etag").to_string();
        assert_eq!(
            encoded_etag,
            format!("{}{suffix}\"", etag.trim_end_matches('"'))
        );
        let form = file["encodings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["encoding"] == token)
            .unwrap();
        assert_eq!(header(&encoded, "content-length"), form["size"].to_string());
        let again = get(
            scoped.clone(),
            &[
                ("accept-encoding", accept),
                ("if-none-match", &encoded_etag),
            ],
        )
        .await
        .unwrap();
        assert_eq!(again.status(), 304);
    }

    // Only published builds of this game: another game's build, an unknown one, a missing
    // path are not found.
    for path in [
        format!("/play/play-game/@{other}/main.js"),
        format!("/play/play-other/@{v1}/"),
        "/play/play-game/@00000000-0000-0000-0000-000000000000/".to_string(),
        "/play/play-game/@nonsense/main.js".to_string(),
        format!("/play/play-game/@{v1}/nothing.js"),
        "/play/no-such-game/@x/".to_string(),
    ] {
        let response = get(path.clone(), &[]).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    kiln.stop().await;
}

/// `/play/` reads a release's manifest from the store once, not per request; a release or
/// rollback still moves the live route at once (it is a new release with its own key).
pub async fn play_reads_each_manifest_once_and_follows_releases(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let (_, token) = kiln.team("play-cache").await;
    let v1 = kiln
        .publish(&token, "cached-game", "1", small_game("one"))
        .await;
    kiln.publish(&token, "cached-game", "2", small_game("two"))
        .await;
    let get = |path: &str| kiln.http.get(format!("{}{path}", kiln.content)).send();
    let script = get("/play/cached-game/main.js").await.unwrap();
    assert_eq!(script.status(), 200);
    assert!(script.text().await.unwrap().contains("'two'"));

    // With the stored manifest gone, the live route still answers from the parsed copy.
    let storage = &kiln.running.as_ref().unwrap().state.storage;
    let db = &kiln.running.as_ref().unwrap().state.db;
    let live_key = manifest_key_of(&kiln, "cached-game").await;
    let live_manifest = storage.get_bytes(&live_key).await.unwrap();
    storage.delete(&live_key).await.unwrap();
    for _ in 0..3 {
        let script = get("/play/cached-game/main.js").await.unwrap();
        assert_eq!(
            script.status(),
            200,
            "live: served from the cached manifest"
        );
    }
    // So does the build-scoped one, which then asks neither the database nor the store.
    let scoped = format!("/play/cached-game/@{v1}/main.js");
    assert_eq!(get(&scoped).await.unwrap().status(), 200);
    let v1_key = db.manifests_for_build(&v1).await.unwrap()[0]
        .manifest_key
        .clone();
    let v1_manifest = storage.get_bytes(&v1_key).await.unwrap();
    storage.delete(&v1_key).await.unwrap();
    for _ in 0..3 {
        let script = get(&scoped).await.unwrap();
        assert_eq!(
            script.status(),
            200,
            "build-scoped: served from the cached manifest"
        );
    }
    // Back as they were: workers read them (signing v1's next release reads v1's own).
    storage.put_bytes(&live_key, live_manifest).await.unwrap();
    storage.put_bytes(&v1_key, v1_manifest).await.unwrap();

    // A rollback moves the live route at once.
    let response = kiln
        .http
        .post(format!("{}/v1/games/cached-game/releases", kiln.url))
        .bearer_auth(&token)
        .json(&json!({ "build_id": v1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let page = get("/play/cached-game/").await.unwrap();
    assert!(
        page.text().await.unwrap().contains("one"),
        "the live build switched"
    );
    let script = get("/play/cached-game/main.js").await.unwrap();
    assert!(script.text().await.unwrap().contains("'one'"));
    kiln.stop().await;
}

/// The key of the game's live release manifest, as the database has it.
async fn manifest_key_of(kiln: &Kiln, game: &str) -> String {
    let db = &kiln.running.as_ref().unwrap().state.db;
    db.live_release(game).await.unwrap().unwrap().manifest_key
}

/// The loader: brotli and gzip forms by `Accept-Encoding`, an ETag per form, 304s, and an
/// immutable content-addressed path (`kiln_common::loader::versioned_path`).
pub async fn loader_is_compressed_and_versioned(deployment: Deployment) {
    let kiln = Kiln::start(deployment).await;
    let loader = kiln_common::loader::LOADER.as_bytes();
    let get = |path: String, headers: &[(&str, &str)]| {
        let mut request = kiln.http.get(format!("{}{path}", kiln.content));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.send()
    };
    let versioned = kiln_common::loader::versioned_path();
    assert_eq!(
        versioned,
        format!("/sdk/kiln-loader.{}.js", &sha256_hex(loader)[..16])
    );
    for (path, cache_control) in [
        ("/sdk/kiln-loader.js".to_string(), "public, max-age=300"),
        (versioned.clone(), "public, max-age=31536000, immutable"),
    ] {
        let identity = get(path.clone(), &[]).await.unwrap();
        assert_eq!(identity.status(), 200);
        assert_eq!(header(&identity, "cache-control"), cache_control);
        assert_eq!(header(&identity, "vary"), "Accept-Encoding");
        assert_eq!(header(&identity, "timing-allow-origin"), "*");
        assert_eq!(header(&identity, "access-control-allow-origin"), "*");
        assert!(header(&identity, "content-type").starts_with("text/javascript"));
        assert_eq!(header(&identity, "content-encoding"), "");
        let identity_etag = header(&identity, "etag").to_string();
        assert_eq!(&identity.bytes().await.unwrap()[..], loader);

        let br = get(path.clone(), &[("accept-encoding", "gzip, deflate, br")])
            .await
            .unwrap();
        assert_eq!(header(&br, "content-encoding"), "br");
        assert_eq!(header(&br, "cache-control"), cache_control);
        let br_etag = header(&br, "etag").to_string();
        let br_body = br.bytes().await.unwrap();
        let mut decoded = Vec::new();
        brotli::BrotliDecompress(&mut &br_body[..], &mut decoded).unwrap();
        assert_eq!(decoded, loader);
        assert!(
            br_body.len() * 3 < loader.len(),
            "brotli: {} of {} bytes",
            br_body.len(),
            loader.len()
        );

        let gz = get(path.clone(), &[("accept-encoding", "gzip")])
            .await
            .unwrap();
        assert_eq!(header(&gz, "content-encoding"), "gzip");
        let gz_etag = header(&gz, "etag").to_string();
        let gz_body = gz.bytes().await.unwrap();
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(&gz_body[..])
            .read_to_end(&mut decoded)
            .unwrap();
        assert_eq!(decoded, loader);

        let etags = [&identity_etag, &br_etag, &gz_etag];
        assert!(
            etags[0] != etags[1] && etags[1] != etags[2] && etags[0] != etags[2],
            "an ETag per encoding: {etags:?}"
        );
        for (accept, etag) in [("", &identity_etag), ("br", &br_etag), ("gzip", &gz_etag)] {
            let again = get(
                path.clone(),
                &[("accept-encoding", accept), ("if-none-match", etag)],
            )
            .await
            .unwrap();
            assert_eq!(again.status(), 304, "{path} {accept}");
            assert_eq!(header(&again, "etag"), etag.as_str());
        }
    }
    // Any other version is not found.
    for path in [
        "/sdk/kiln-loader.0000000000000000.js",
        "/sdk/kiln-loader.abc.js",
        "/sdk/other.js",
    ] {
        let response = get(path.to_string(), &[]).await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    kiln.stop().await;
}
