//! The embedded deployment (SQLite, local object directory, in-process worker) over real HTTP.

mod common;
mod scenarios;

use common::Deployment::Embedded;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upload_publishes_a_verified_manifest() {
    scenarios::upload_publishes_a_verified_manifest(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reupload_returns_the_existing_build() {
    scenarios::reupload_returns_the_existing_build(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn teams_are_isolated() {
    scenarios::teams_are_isolated(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_packages_get_clear_errors() {
    scenarios::bad_packages_get_clear_errors(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cdn_serves_with_cache_headers() {
    scenarios::cdn_serves_with_cache_headers(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operations_endpoints() {
    scenarios::operations_endpoints(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_worker_still_publishes_once() {
    scenarios::killed_worker_still_publishes_once(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_build_without_a_job_is_queued_again() {
    scenarios::queued_build_without_a_job_is_queued_again(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_lets_the_worker_finish_its_job() {
    scenarios::sigterm_lets_the_worker_finish_its_job(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_published_build_shows_every_stage_done() {
    scenarios::a_published_build_shows_every_stage_done(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_that_loses_its_queue_finishes_its_job_and_goes_on() {
    scenarios::a_worker_that_loses_its_queue_finishes_its_job_and_goes_on(Embedded).await;
}

/// Embedded only: the failure is injected through the local object directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transient_failures_are_retried_then_fail_the_build() {
    scenarios::transient_failures_are_retried_then_fail_the_build(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotated_keys_keep_old_manifests_verifiable() {
    scenarios::rotated_keys_keep_old_manifests_verifiable(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_uploads_are_bounded() {
    scenarios::concurrent_uploads_are_bounded(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vat_bakes_what_the_build_asks_for() {
    scenarios::vat_bakes_what_the_build_asks_for(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn engines_split_into_the_shared_library() {
    scenarios::engines_split_into_the_shared_library(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn releases_roll_back_with_a_higher_sequence() {
    scenarios::releases_roll_back_with_a_higher_sequence(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_releases_are_resigned_before_expiry() {
    scenarios::live_releases_are_resigned_before_expiry(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn telemetry_is_validated_and_limited() {
    scenarios::telemetry_is_validated_and_limited(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn library_entries_retire_when_no_live_release_needs_them() {
    scenarios::library_entries_retire_when_no_live_release_needs_them(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decode_beacons_choose_variants_per_device_class() {
    scenarios::decode_beacons_choose_variants_per_device_class(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_ack_answers_before_the_write() {
    scenarios::queued_ack_answers_before_the_write(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn telemetry_is_committed_before_it_is_acknowledged() {
    scenarios::telemetry_is_committed_before_it_is_acknowledged(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keep_alive_responses_do_not_wait_for_delayed_acks() {
    scenarios::keep_alive_responses_do_not_wait_for_delayed_acks(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn play_serves_live_and_build_scoped_files() {
    scenarios::play_serves_live_and_build_scoped_files(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn loader_is_compressed_and_versioned() {
    scenarios::loader_is_compressed_and_versioned(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn library_saves_only_what_another_game_brought() {
    scenarios::library_saves_only_what_another_game_brought(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn play_reads_each_manifest_once_and_follows_releases() {
    scenarios::play_reads_each_manifest_once_and_follows_releases(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn beacon_metric_labels_stay_bounded() {
    scenarios::beacon_metric_labels_stay_bounded(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_decode_beacons_do_not_steer_variant_choices() {
    scenarios::forged_decode_beacons_do_not_steer_variant_choices(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_preheat_beacons_do_not_move_library_roi() {
    scenarios::forged_preheat_beacons_do_not_move_library_roi(Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn beacons_are_rate_limited_per_game() {
    scenarios::beacons_are_rate_limited_per_game(Embedded).await;
}

/// A request cut off by a timeout layer is answered 503 with the JSON error code `timeout`,
/// never 408: Chromium takes a 408 on a reused connection for an idle connection the server
/// closed and sends the request again by itself, so a telemetry beacon that timed out was
/// counted twice. Here a beacon's body stalls past a 1 s request timeout, on both origins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_request_is_a_503_that_browsers_do_not_resend() {
    let kiln = common::Kiln::start_with(Embedded, |c| c.upload.request_timeout_secs = 1).await;
    let mut checked = 0;
    for origin in [&kiln.url, &kiln.content] {
        let (status, body) = stalled_post(origin, "/v1/telemetry").await;
        assert_eq!(status, 503, "{origin}: {body}");
        assert_eq!(body["error"]["code"], "timeout", "{origin}: {body}");
        checked += 1;
    }
    assert_eq!(checked, 2);
    kiln.stop().await;
}

/// Sends a request whose body never arrives in full; returns the answer's status and JSON.
async fn stalled_post(base: &str, path: &str) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = reqwest::Url::parse(base).unwrap();
    let host = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\nConnection: close\r\n\r\n{{\"events\": ["
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server answers and closes; a generous deadline only so a hang fails clearly.
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("no answer within 60 s")
    .unwrap();
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text}"));
    let body = &text[text.find("\r\n\r\n").map_or(0, |i| i + 4)..];
    let json = body
        .find('{')
        .zip(body.rfind('}'))
        .and_then(|(a, b)| serde_json::from_str(&body[a..=b]).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, json)
}
