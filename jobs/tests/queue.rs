//! A build's next attempt goes into the queue as a job of its own, due after its backoff, on
//! both queue backends: SQLite (the embedded default) and PostgreSQL (`KILN_TEST_PG_URL`;
//! required under `CI=true`). Read back from the queue's own table.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_common::config::Config;
use kiln_common::db::QueuePool;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `(run_at in Unix seconds)` of every job of Kiln's queue.
async fn due_times(queue: &QueuePool) -> Vec<i64> {
    match queue {
        QueuePool::Sqlite(pool) => sqlx::query_scalar::<_, i64>(
            "SELECT run_at FROM Jobs WHERE job_type = ? ORDER BY run_at",
        )
        .bind(kiln_jobs::QUEUE)
        .fetch_all(pool)
        .await
        .unwrap(),
        QueuePool::Postgres(pool) => sqlx::query_scalar::<_, i64>(
            "SELECT extract(epoch FROM run_at)::bigint FROM apalis.jobs WHERE job_type = $1 \
             ORDER BY run_at",
        )
        .bind(kiln_jobs::QUEUE)
        .fetch_all(pool)
        .await
        .unwrap(),
    }
}

async fn retries_are_due_after_their_backoff(config: &Config) {
    let db = kiln_jobs::open_database(config, 4).await.unwrap();
    let before = now();
    kiln_jobs::enqueue_retry(&db, "a-build", 2, Duration::from_secs(30))
        .await
        .unwrap();
    let due = due_times(&db.queue).await;
    assert_eq!(due.len(), 1, "{due:?}");
    // Not before its backoff (whole seconds), not long after.
    assert!(
        due[0] >= before + 29 && due[0] <= now() + 31,
        "due {} at {before}",
        due[0]
    );
    db.close().await;
}

#[tokio::test]
async fn a_retry_is_queued_with_its_delay_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    retries_are_due_after_their_backoff(&config).await;
}

#[tokio::test]
async fn a_retry_is_queued_with_its_delay_postgres() {
    let Ok(admin_url) = std::env::var("KILN_TEST_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "KILN_TEST_PG_URL is not set: under CI this test must run against PostgreSQL"
        );
        eprintln!("KILN_TEST_PG_URL is not set: PostgreSQL not checked");
        return;
    };
    let name = format!("kiln_jobs_test_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().to_owned(),
        database_url: format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0),
        ..Config::default()
    };
    retries_are_due_after_their_backoff(&config).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await
    .unwrap();
}
