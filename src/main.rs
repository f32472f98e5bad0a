//! `tessera [path/to/tessera.conf] [--directive value ...]`: reads the
//! configuration like `redis-server` and runs the server.

mod log;
mod server;

use config::{parse_cli, CliAction};

/// glibc's malloc with per-thread counters behind `used_memory` and
/// `maxmemory` (see `engine::alloc`).
#[global_allocator]
static ALLOC: engine::alloc::Counting = engine::alloc::Counting;

/// The tunable that sizes glibc's per-thread cache of freed chunks.
const TCACHE_COUNT: &str = "glibc.malloc.tcache_count";
/// Chunks per size class in that cache (glibc's default is 7).
const TCACHE_CHUNKS: u32 = 256;

/// Gives glibc's per-thread cache room for 256 chunks per size class.
///
/// Cross-shard work is allocated on one thread and freed on another (a
/// coordinator's jobs and their outputs). With glibc's default of 7
/// chunks per size class, each thread's cache soon overflows with the
/// other thread's chunks and runs dry of its own, so most allocations and
/// frees on that path go to the arenas and their locks (`_int_malloc`
/// and `_int_free` were 9% of server cycles for MGET of 10 keys on two
/// shards at pipeline 16). With 256, server CPU per op at pipeline 16 fell
/// 5-12% (bench/tx.sh) and 20-25% for EXISTS of 10 keys. The cache holds
/// freed chunks of up to 1 KiB: at most about 8 MiB per thread.
///
/// The size is read only from `GLIBC_TUNABLES`, by the dynamic loader at
/// start, so the process executes itself once more with it set (same
/// PID, same arguments). A `GLIBC_TUNABLES` that already names the tunable
/// is left alone; if the new image cannot start, this one goes on. Under
/// valgrind, which does not follow the re-execution, set the variable by
/// hand (`GLIBC_TUNABLES=glibc.malloc.tcache_count=256`).
fn tune_malloc() {
    use std::os::unix::process::CommandExt;
    if !cfg!(target_env = "gnu") {
        return;
    }
    let cur = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    let Some(tunables) = tunables_with_tcache(&cur) else {
        return;
    };
    let mut argv = std::env::args_os();
    let arg0 = argv.next().unwrap_or_default();
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(argv)
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    eprintln!("Could not tune malloc ({err}); running with its defaults.");
}

/// `GLIBC_TUNABLES` with the tcache size added, or `None` if `cur`
/// names it already.
fn tunables_with_tcache(cur: &str) -> Option<String> {
    if cur
        .split(':')
        .any(|t| t.split('=').next() == Some(TCACHE_COUNT))
    {
        return None;
    }
    let sep = if cur.is_empty() { "" } else { ":" };
    Some(format!("{cur}{sep}{TCACHE_COUNT}={TCACHE_CHUNKS}"))
}

/// `daemonize yes`: Redis's `daemonize()` — fork, the parent exits 0, the
/// child starts a session of its own with stdin, stdout and stderr on
/// /dev/null (the working directory is kept: `dir` decides it). Runs before
/// any thread starts, as a fork must.
fn daemonize() {
    // SAFETY: single-threaded here; daemon(3) forks, calls setsid and
    // redirects the standard descriptors, with no Rust state involved.
    if unsafe { libc::daemon(1, 0) } != 0 {
        eprintln!("Can't daemonize: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
}

fn main() {
    tune_malloc();
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
    if cfg.daemonize {
        daemonize();
    }
    if let Err(e) = log::init(cfg.loglevel, cfg.logfile.as_deref()) {
        eprintln!("Can't open the log file: {e}");
        std::process::exit(1);
    }
    if let Err((n, line, why)) = commands::table::apply_renames(&cfg.rename_commands) {
        eprintln!(
            "\n*** FATAL CONFIG FILE ERROR (Tessera {}) ***\nReading the configuration file, at line \
             {n}\n>>> '{line}'\n{why}",
            config::VERSION
        );
        std::process::exit(1);
    }
    if let Err(e) = server::run(cfg) {
        log::warning(format_args!("{e}"));
        eprintln!("{e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcache_size_is_added_unless_the_user_set_one() {
        assert_eq!(
            tunables_with_tcache("").as_deref(),
            Some("glibc.malloc.tcache_count=256")
        );
        assert_eq!(
            tunables_with_tcache("glibc.malloc.arena_max=2").as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=256")
        );
        assert_eq!(tunables_with_tcache("glibc.malloc.tcache_count=7"), None);
        assert_eq!(
            tunables_with_tcache("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0"),
            None
        );
    }
}
