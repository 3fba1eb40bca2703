//! The migrations' rules: SQLite and PostgreSQL carry the same list, and every PostgreSQL
//! migration after the last released one (`migrations/RELEASED`) only expands the schema, so
//! the previous release keeps working while the chart's migration Job runs and pods roll
//! (expand, then contract). A step that removes or narrows something must say so in its first
//! lines (`-- kiln:contract <why the previous release no longer needs it>`).

use std::path::{Path, PathBuf};

fn migrations(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// What in `sql` could break the release before it, one line per statement found.
fn breaking(sql: &str) -> Vec<String> {
    if sql
        .lines()
        .take(5)
        .any(|l| l.trim_start().starts_with("-- kiln:contract "))
    {
        return Vec::new();
    }
    let code: String = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    let mut found = Vec::new();
    for statement in code.split(';') {
        let s = statement.split_whitespace().collect::<Vec<_>>().join(" ");
        let upper = s.to_uppercase();
        let bad = upper.contains("DROP TABLE")
            || upper.contains("DROP COLUMN")
            || upper.contains("DROP CONSTRAINT")
            || upper.contains("DROP INDEX")
            || upper.contains("RENAME")
            || upper.contains("SET NOT NULL")
            || (upper.contains("ALTER COLUMN") && upper.contains(" TYPE "))
            || (upper.contains("ADD COLUMN")
                && upper.contains("NOT NULL")
                && !upper.contains("DEFAULT"))
            || upper.contains("TRUNCATE")
            || upper.starts_with("DELETE");
        if bad {
            found.push(s);
        }
    }
    found
}

#[test]
fn both_databases_carry_the_same_migrations() {
    let pg: Vec<String> = migrations("postgres").iter().map(|p| name(p)).collect();
    let sqlite: Vec<String> = migrations("sqlite").iter().map(|p| name(p)).collect();
    assert!(pg.len() >= 8, "{pg:?}");
    assert_eq!(pg, sqlite);
}

#[test]
fn migrations_after_the_last_release_only_expand_the_schema() {
    let released = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/RELEASED"),
    )
    .unwrap();
    let released = released.trim();
    assert_eq!(
        released.len(),
        14,
        "RELEASED holds a migration version: {released:?}"
    );
    let all = migrations("postgres");
    assert!(
        all.iter().any(|p| name(p).starts_with(released)),
        "RELEASED names no migration"
    );
    let mut checked = 0;
    for path in all.iter().filter(|p| name(p).as_str() > released) {
        let sql = std::fs::read_to_string(path).unwrap();
        let found = breaking(&sql);
        assert!(
            found.is_empty(),
            "{} would break the release before it during a rolling update: {found:#?}\n\
             expand first (new nullable or defaulted columns, new tables), contract in a later \
             release, and mark that step `-- kiln:contract <why>`",
            name(path)
        );
        checked += 1;
    }
    eprintln!("{checked} migration(s) after {released} checked");
}

#[test]
fn the_check_refuses_what_breaks_the_previous_release() {
    for sql in [
        "ALTER TABLE builds DROP COLUMN status;",
        "ALTER TABLE builds RENAME COLUMN status TO state;",
        "ALTER TABLE games ADD COLUMN owner TEXT NOT NULL;",
        "ALTER TABLE games ALTER COLUMN owner SET NOT NULL;",
        "ALTER TABLE games ALTER COLUMN live_sequence TYPE INTEGER;",
        "DROP TABLE releases;",
        "ALTER TABLE builds DROP CONSTRAINT builds_game_key;",
    ] {
        assert_eq!(breaking(sql).len(), 1, "{sql}");
    }
    for sql in [
        "CREATE TABLE x (id TEXT PRIMARY KEY, n BIGINT NOT NULL);",
        "ALTER TABLE games ADD COLUMN owner TEXT;",
        "ALTER TABLE games ADD COLUMN n BIGINT NOT NULL DEFAULT 0;",
        "CREATE INDEX builds_by_game ON builds (game); -- not a DROP TABLE",
        "-- kiln:contract 0.3 stopped reading status\nALTER TABLE builds DROP COLUMN status;",
    ] {
        assert!(breaking(sql).is_empty(), "{sql}");
    }
}
