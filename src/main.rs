//! `tessera [path/to/tessera.conf] [--directive value ...]`: reads the
//! configuration like `redis-server` and runs the server.

mod log;
mod server;

use config::{parse_cli, CliAction};

/// glibc's malloc with per-thread counters behind `used_memory` and
/// `maxmemory` (see `engine::alloc`).
#[global_allocator]
static ALLOC: engine::alloc::Counting = engine::alloc::Counting;

fn main() {
    engine::alloc::mark_installed();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match parse_cli(&args) {
        Ok(CliAction::Run(cfg)) => *cfg,
        Ok(CliAction::Help(text)) => {
            println!("{text}");
            return;
        }
        Ok(CliAction::Version(text)) => {
            println!("{text}");
            return;
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = log::init(cfg.loglevel, cfg.logfile.as_deref()) {
        eprintln!("Can't open the log file: {e}");
        std::process::exit(1);
    }
    if let Err(e) = server::run(cfg) {
        log::warning(format_args!("{e}"));
        eprintln!("{e}");
        std::process::exit(1);
    }
}
