//! `kiln-api`: the HTTP service, with in-process workers in the embedded mode.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kiln_common::config::Config;

#[derive(Parser)]
#[command(name = "kiln-api", version, about = "Kiln HTTP service")]
struct Cli {
    /// Workers to run in this process (default: 1 with the embedded database, 0 with PostgreSQL).
    #[arg(long)]
    workers: Option<usize>,
    /// After starting, package this game directory, upload it, and print the result.
    #[arg(long)]
    demo: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<ApiCommand>,
}

#[derive(Subcommand)]
enum ApiCommand {
    /// Run the database migrations (Kiln's tables and the job queue's) and exit: the
    /// deployment step for a role that may change the schema, before processes that start
    /// with KILN_MIGRATE_ON_START=false.
    Migrate,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let mut config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kiln-api: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    kiln_common::init_tracing(config.log_json);
    if let Some(n) = cli.workers {
        config.worker.in_process = Some(n);
    }
    if cli.demo.is_some() && config.admin_token.is_empty() {
        // The demo creates its team through the API, like an operator would.
        config.admin_token = kiln_api::auth::new_token();
    }
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = match cli.command {
        Some(ApiCommand::Migrate) => runtime.block_on(async {
            kiln_jobs::migrate(&config).await?;
            eprintln!("kiln-api: migrations applied");
            Ok(())
        }),
        None => runtime.block_on(serve(config, cli.demo)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln-api: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config, demo: Option<PathBuf>) -> anyhow::Result<()> {
    let admin = config.admin_token.clone();
    let running = kiln_api::start(config).await?;
    if let Some(dir) = demo {
        let base = running.state.config.public_url();
        let content = running.content_url();
        if let Err(e) = kiln_api::demo::run(&base, &content, &admin, &dir).await {
            eprintln!("kiln-api: demo failed: {e:#}");
        }
        println!("serving on {base} — Ctrl-C to stop");
    }
    kiln_jobs::shutdown_signal().await;
    running.shutdown().await;
    Ok(())
}
