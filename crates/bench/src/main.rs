//! `strata-bench`: the load generator (`run`) and the side-by-side comparison (`compare`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Load generator and side-by-side benchmark runner for strata, memcached and Redis.
#[derive(Parser)]
#[command(name = "strata-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workload against one server and print (or write) the report.
    Run(strata_bench::BenchArgs),
    /// Start memcached, Redis and strata in turn and run the scenario matrix against each.
    Compare(strata_bench::compare::CompareArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => {
            strata_bench::run(&args).map(|report| print!("{}", report.render_text()))
        }
        Command::Compare(args) => strata_bench::compare::run_compare(&args).map(|_| {
            println!("wrote {}", args.out.join("REPORT.md").display());
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("strata-bench: {error}");
            ExitCode::FAILURE
        }
    }
}
