//! The `strata` binary: `strata serve` runs the server, `strata bench` the load generator,
//! `strata pool inspect|verify` looks at a pool file, `strata flash verify` at a flash tier.
//!
//! Exit codes: 0 after a clean shutdown, 1 when the server fails at run time (a port in use,
//! a pool that cannot open), 2 for invalid flags or configuration. A panic on any thread but a
//! worker ends `strata serve` with SIGABRT after logging it (`strata_server::panics`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod flash_cmd;
mod pool_cmd;

/// Exit code for invalid flags or configuration (clap uses the same for usage errors).
const EXIT_CODE_CONFIG: u8 = 2;

/// strata: a memcached- and Redis-compatible key-value cache over DRAM, persistent memory and
/// files, restarting warm.
#[derive(Parser)]
#[command(name = "strata", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (memcached and Redis protocols, HTTP metrics).
    Serve(strata_server::ServeOptions),
    /// Run a workload against a server and print the report.
    Bench(strata_bench::BenchArgs),
    /// Inspect or verify a pool file.
    #[command(subcommand)]
    Pool(pool_cmd::PoolCommand),
    /// Verify a flash tier's file or block device.
    #[command(subcommand)]
    Flash(flash_cmd::FlashCommand),
    /// Serve block devices over NBD with a cache in front (`strata block --export ...`), or
    /// talk to a running one (`strata block stats|mode|flush|detach --admin ADDR`).
    Block(BlockCommand),
}

/// `strata block`: serve (the flags), or one of the actions on a running server.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BlockCommand {
    #[command(subcommand)]
    action: Option<BlockAction>,
    #[command(flatten)]
    serve: strata_block::BlockOptions,
}

/// Actions on a running `strata block`, through its admin port (`--admin-listen`).
#[derive(Subcommand)]
enum BlockAction {
    /// Print each export's mode, cache occupancy and counters.
    Stats {
        /// The server's admin address.
        #[arg(long, value_name = "ADDR")]
        admin: String,
    },
    /// Switch an export's cache mode (wt, wb, wa, wi, pt); leaving wb writes every dirty line
    /// back first.
    Mode {
        /// The server's admin address.
        #[arg(long, value_name = "ADDR")]
        admin: String,
        /// The export.
        export: String,
        /// The new mode.
        mode: String,
    },
    /// Write every dirty line of an export back and make every completed write durable.
    Flush {
        /// The server's admin address.
        #[arg(long, value_name = "ADDR")]
        admin: String,
        /// The export.
        export: String,
    },
    /// Detach an export's cache: every dirty line written back, the export in pass-through,
    /// every cached line dropped (a switch to a cache mode later starts it cold).
    Detach {
        /// The server's admin address.
        #[arg(long, value_name = "ADDR")]
        admin: String,
        /// The export.
        export: String,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(options) => serve(options),
        Command::Pool(command) => pool_cmd::run(command),
        Command::Flash(command) => flash_cmd::run(command),
        Command::Block(BlockCommand {
            action: None,
            serve,
        }) => block(&serve),
        Command::Block(BlockCommand {
            action: Some(action),
            ..
        }) => block_action(action),
        Command::Bench(args) => match strata_bench::run(&args) {
            Ok(report) => {
                print!("{}", report.render_text());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("strata bench: {error}");
                ExitCode::FAILURE
            }
        },
    }
}

fn block_action(action: BlockAction) -> ExitCode {
    let (admin, method, path) = match &action {
        BlockAction::Stats { admin } => (admin, "GET", "/stats".to_string()),
        BlockAction::Mode {
            admin,
            export,
            mode,
        } => (admin, "POST", format!("/exports/{export}/mode/{mode}")),
        BlockAction::Flush { admin, export } => (admin, "POST", format!("/exports/{export}/flush")),
        BlockAction::Detach { admin, export } => {
            (admin, "POST", format!("/exports/{export}/detach"))
        }
    };
    match strata_block::admin::request(admin, method, &path) {
        Ok((200, body)) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprint!("strata block: {status}: {body}");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("strata block: admin port {admin}: {error}");
            ExitCode::FAILURE
        }
    }
}

fn block(options: &strata_block::BlockOptions) -> ExitCode {
    strata_server::logging::init(
        strata_server::config::LogLevel::Info,
        strata_server::config::LogFormat::Text,
    );
    let block = match strata_block::Block::start(options) {
        Ok(block) => block,
        Err(error @ strata_block::StartError::Config(_)) => {
            eprintln!("strata block: invalid configuration: {error}");
            return ExitCode::from(EXIT_CODE_CONFIG);
        }
        Err(error) => {
            eprintln!("strata block: {error}");
            return ExitCode::FAILURE;
        }
    };
    match block.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("strata block: {error}");
            ExitCode::FAILURE
        }
    }
}

fn serve(options: strata_server::ServeOptions) -> ExitCode {
    let config = match options.resolve() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("strata serve: invalid configuration: {error}");
            return ExitCode::from(EXIT_CODE_CONFIG);
        }
    };
    strata_server::logging::init(config.log_level, config.log_format);
    strata_server::panics::install_hook();
    match strata_server::serve(&config, strata_server::sessions::builtin()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Once: the log writes to standard error at every level, errors included.
            tracing::error!(%error, "strata serve failed");
            ExitCode::FAILURE
        }
    }
}
