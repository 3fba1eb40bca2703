//! The distributed deployment: PostgreSQL and a real S3-compatible server (Garage), started by
//! `.ci/run`. Ignored by default; `.ci/run` runs them with `--include-ignored`.

mod common;
mod scenarios;

use common::Deployment::Distributed;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn upload_publishes_a_verified_manifest() {
    scenarios::upload_publishes_a_verified_manifest(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn reupload_returns_the_existing_build() {
    scenarios::reupload_returns_the_existing_build(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn teams_are_isolated() {
    scenarios::teams_are_isolated(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn bad_packages_get_clear_errors() {
    scenarios::bad_packages_get_clear_errors(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn cdn_serves_with_cache_headers() {
    scenarios::cdn_serves_with_cache_headers(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn operations_endpoints() {
    scenarios::operations_endpoints(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn killed_worker_still_publishes_once() {
    scenarios::killed_worker_still_publishes_once(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn queued_build_without_a_job_is_queued_again() {
    scenarios::queued_build_without_a_job_is_queued_again(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn sigterm_lets_the_worker_finish_its_job() {
    scenarios::sigterm_lets_the_worker_finish_its_job(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn a_published_build_shows_every_stage_done() {
    scenarios::a_published_build_shows_every_stage_done(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn a_worker_that_loses_its_queue_finishes_its_job_and_goes_on() {
    scenarios::a_worker_that_loses_its_queue_finishes_its_job_and_goes_on(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn rotated_keys_keep_old_manifests_verifiable() {
    scenarios::rotated_keys_keep_old_manifests_verifiable(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn concurrent_uploads_are_bounded() {
    scenarios::concurrent_uploads_are_bounded(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn vat_bakes_what_the_build_asks_for() {
    scenarios::vat_bakes_what_the_build_asks_for(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn engines_split_into_the_shared_library() {
    scenarios::engines_split_into_the_shared_library(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn releases_roll_back_with_a_higher_sequence() {
    scenarios::releases_roll_back_with_a_higher_sequence(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn live_releases_are_resigned_before_expiry() {
    scenarios::live_releases_are_resigned_before_expiry(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn telemetry_is_validated_and_limited() {
    scenarios::telemetry_is_validated_and_limited(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn library_entries_retire_when_no_live_release_needs_them() {
    scenarios::library_entries_retire_when_no_live_release_needs_them(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn decode_beacons_choose_variants_per_device_class() {
    scenarios::decode_beacons_choose_variants_per_device_class(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn queued_ack_answers_before_the_write() {
    scenarios::queued_ack_answers_before_the_write(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn telemetry_is_committed_before_it_is_acknowledged() {
    scenarios::telemetry_is_committed_before_it_is_acknowledged(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn keep_alive_responses_do_not_wait_for_delayed_acks() {
    scenarios::keep_alive_responses_do_not_wait_for_delayed_acks(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn play_serves_live_and_build_scoped_files() {
    scenarios::play_serves_live_and_build_scoped_files(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn loader_is_compressed_and_versioned() {
    scenarios::loader_is_compressed_and_versioned(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn library_saves_only_what_another_game_brought() {
    scenarios::library_saves_only_what_another_game_brought(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn play_reads_each_manifest_once_and_follows_releases() {
    scenarios::play_reads_each_manifest_once_and_follows_releases(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn beacon_metric_labels_stay_bounded() {
    scenarios::beacon_metric_labels_stay_bounded(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn forged_decode_beacons_do_not_steer_variant_choices() {
    scenarios::forged_decode_beacons_do_not_steer_variant_choices(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn forged_preheat_beacons_do_not_move_library_roi() {
    scenarios::forged_preheat_beacons_do_not_move_library_roi(Distributed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and an S3-compatible server (.ci/run starts them)"]
async fn beacons_are_rate_limited_per_game() {
    scenarios::beacons_are_rate_limited_per_game(Distributed).await;
}
