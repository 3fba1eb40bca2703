//! The release rules (`worker/src/release.rs`) and the compare-and-set under them, on a real
//! SQLite database and local store, step by step: fast and deterministic (the same rules
//! raced by worker processes on PostgreSQL: `api/tests/platform/release_races.rs`).

use kiln_common::config::Config;
use kiln_common::db::{ManifestRow, NewBuild, ReleaseRow};
use kiln_common::manifest::{MANIFEST_SCHEMA, Manifest};
use kiln_common::storage::Storage;
use kiln_worker::job::JobContext;
use kiln_worker::release::{self, Outcome, Reason};

const GAME: &str = "rules-game";

struct Setup {
    context: std::sync::Arc<JobContext>,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    // As a process opens it: migrated, the job queue set up.
    let db = kiln_jobs::open_database(&config, 4).await.unwrap();
    let storage = Storage::from_config(&config.storage, &config.data_dir)
        .await
        .unwrap();
    let context = kiln_worker::runtime::job_context(&config, db, storage)
        .await
        .unwrap();
    context.db.create_team("team", "rules").await.unwrap();
    context.db.claim_game(GAME, "team").await.unwrap();
    Setup { context, _dir: dir }
}

/// A build of the game with its own published manifest. Upload order is upload time, then
/// id: the tests name builds so that the id order is the call order too.
async fn build(context: &JobContext, id: &str) -> Manifest {
    let created = kiln_common::db::now();
    context
        .db
        .insert_build(
            NewBuild {
                id,
                team_id: "team",
                game: GAME,
                version: id,
                package_key: &format!("packages/{id}.zip"),
                package_format: "zip",
                package_sha256: id,
                package_size: 1,
                idempotency_key: None,
            },
            &[],
        )
        .await
        .unwrap();
    // From JSON, so fields added to the manifest later keep their defaults here.
    let manifest: Manifest = serde_json::from_value(serde_json::json!({
        "schema": MANIFEST_SCHEMA,
        "game": GAME,
        "version": id,
        "build_id": id,
        "package_sha256": id,
        "created_at": created,
        "files": [],
    }))
    .unwrap();
    let key = format!("manifests/{id}.json");
    context
        .storage
        .put_bytes(&key, serde_json::to_vec(&manifest).unwrap().into())
        .await
        .unwrap();
    context
        .db
        .record_publication(
            &ManifestRow {
                build_id: id.into(),
                game: GAME.into(),
                manifest_key: key,
                sha256: "-".into(),
                kid: "-".into(),
                signature: "-".into(),
                created_at: kiln_common::db::now(),
            },
            "publish",
        )
        .await
        .unwrap();
    manifest
}

fn signed(outcome: Outcome) -> ReleaseRow {
    match outcome {
        Outcome::Signed(row) => *row,
        other => panic!("expected a signed release, got {other:?}"),
    }
}

async fn live(context: &JobContext) -> (i64, String) {
    let row = context.db.live_release(GAME).await.unwrap().unwrap();
    (row.sequence, row.build_id)
}

#[tokio::test]
async fn the_live_release_changes_only_by_compare_and_set() {
    let Setup { context, _dir } = setup().await;
    build(&context, "b1").await;
    build(&context, "b2").await;
    let row = |sequence: i64, build: &str| ReleaseRow {
        game: GAME.into(),
        sequence,
        build_id: build.into(),
        manifest_key: format!("manifests/{build}-{sequence}.json"),
        sha256: "-".into(),
        kid: "-".into(),
        signature: "-".into(),
        expires_at: "2099-01-01T00:00:00Z".into(),
        reason: "release".into(),
        created_at: kiln_common::db::now(),
    };
    let db = &context.db;
    assert!(db.insert_release_if_live(&row(1, "b1"), 0).await.unwrap());
    // A second writer that read "nothing live" loses, whatever it signed.
    assert!(!db.insert_release_if_live(&row(1, "b2"), 0).await.unwrap());
    assert_eq!(live(&context).await, (1, "b1".into()));
    assert!(db.insert_release_if_live(&row(2, "b2"), 1).await.unwrap());
    // A writer that read sequence 1 before that: refused, nothing written.
    assert!(!db.insert_release_if_live(&row(2, "b1"), 1).await.unwrap());
    assert_eq!(live(&context).await, (2, "b2".into()));
    // A sequence that does not follow what it expects is a bug, not a race.
    let error = db
        .insert_release_if_live(&row(5, "b1"), 2)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("expected live sequence 2"),
        "{error}"
    );
    assert_eq!(db.releases(GAME, 10).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_late_publish_never_replaces_a_newer_build() {
    let Setup { context, _dir } = setup().await;
    let older = build(&context, "b1-older").await;
    let newer = build(&context, "b2-newer").await;
    // The newer build finishes first and goes live; the older one finishes late.
    let row = signed(
        release::release(&context, &newer, Reason::Publish)
            .await
            .unwrap(),
    );
    assert_eq!((row.sequence, row.build_id.as_str()), (1, "b2-newer"));
    let late = release::release(&context, &older, Reason::Publish)
        .await
        .unwrap();
    assert!(matches!(late, Outcome::Superseded), "{late:?}");
    assert_eq!(live(&context).await, (1, "b2-newer".into()));
    // A rollback to it is on purpose: it wins.
    let rollback = signed(
        release::release(&context, &older, Reason::Release)
            .await
            .unwrap(),
    );
    assert_eq!(
        (rollback.sequence, rollback.build_id.as_str()),
        (2, "b1-older")
    );
    // A build uploaded after every published one still goes live by its publish.
    let newest = build(&context, "b3-newest").await;
    let row = signed(
        release::release(&context, &newest, Reason::Publish)
            .await
            .unwrap(),
    );
    assert_eq!((row.sequence, row.build_id.as_str()), (3, "b3-newest"));
}

#[tokio::test]
async fn a_resign_signs_only_what_is_live_now() {
    let Setup { context, _dir } = setup().await;
    let first = build(&context, "b1-first").await;
    let second = build(&context, "b2-second").await;
    let due = signed(
        release::release(&context, &first, Reason::Publish)
            .await
            .unwrap(),
    );
    // A re-sign found `first` due; before it signs, `second` is published.
    signed(
        release::release(&context, &second, Reason::Publish)
            .await
            .unwrap(),
    );
    let outcome = release::resign(&context, &due).await.unwrap();
    assert!(matches!(outcome, Outcome::Moved), "{outcome:?}");
    assert_eq!(live(&context).await, (2, "b2-second".into()));
    // What is live is re-signed with the next sequence, same build.
    let live_row = context.db.live_release(GAME).await.unwrap().unwrap();
    let again = signed(release::resign(&context, &live_row).await.unwrap());
    assert_eq!(
        (
            again.sequence,
            again.build_id.as_str(),
            again.reason.as_str()
        ),
        (3, "b2-second", "resign")
    );
    // The same due release a second time (another worker's tick): nothing to do.
    let twice = release::resign(&context, &live_row).await.unwrap();
    assert!(matches!(twice, Outcome::Moved), "{twice:?}");
    let history: Vec<(i64, String, String)> = context
        .db
        .releases(GAME, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.sequence, r.build_id, r.reason))
        .collect();
    assert_eq!(
        history,
        [
            (3, "b2-second".into(), "resign".into()),
            (2, "b2-second".into(), "publish".into()),
            (1, "b1-first".into(), "publish".into()),
        ]
    );
}

#[test]
fn the_rules_as_a_function() {
    use release::{Decision, Seen, decide};
    let seen = |live: Option<(i64, &'static str)>, newer_published| Seen {
        live,
        newer_published,
    };
    let sign = |sequence| Decision::Sign {
        sequence,
        expected: sequence - 1,
    };
    assert_eq!(
        decide(Reason::Publish, seen(None, false), "a", None),
        sign(1)
    );
    assert_eq!(
        decide(Reason::Publish, seen(Some((4, "b")), true), "a", None),
        Decision::Superseded
    );
    assert_eq!(
        decide(Reason::Release, seen(Some((4, "b")), true), "a", None),
        sign(5)
    );
    assert_eq!(
        decide(Reason::Resign, seen(Some((4, "b")), false), "b", Some(4)),
        sign(5)
    );
    assert_eq!(
        decide(Reason::Resign, seen(Some((5, "b")), false), "b", Some(4)),
        Decision::Moved
    );
    assert_eq!(
        decide(Reason::Resign, seen(Some((4, "c")), false), "b", Some(4)),
        Decision::Moved
    );
    assert_eq!(
        decide(Reason::Resign, seen(None, false), "b", Some(4)),
        Decision::Moved
    );
}
