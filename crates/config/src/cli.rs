//! The command line: `redis-server`'s argument grammar, `--help` and `--version`.
//!
//! # What this module owns
//!
//! [`CliAction`] and [`parse_cli`]: `[/path/to/tessera.conf] [--directive value ...] [-]`
//! turned into config text (file, then stdin, then the options as lines), exactly as Redis's
//! `main()` and `loadServerConfig()` do, so errors carry the same line numbers. The only I/O
//! of the crate besides `CONFIG REWRITE`: reading the config file and stdin, bounded by
//! [`MAX_CONFIG_BYTES`].
//!
//! # Why it is a module of its own
//!
//! It is the one place that touches files and stdin; the inputs are injected
//! (`parse_cli_with`) so the grammar is tested without either.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::directives::{Runtime::Mutable, DIRECTIVES};
use crate::parse::{cat_repr, parse_config_bytes, split_args, ConfigError};
use crate::{Config, MAX_CONFIG_BYTES, VERSION};

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum CliAction {
    /// Start the server with this configuration.
    Run(Box<Config>),
    /// Print this usage text (to stderr, like redis-server) and exit 1.
    Help(String),
    /// Print this version line (to stdout) and exit 0.
    Version(String),
}

/// Parses `args` (without `argv[0]`) as `redis-server` does:
/// `[/path/to/tessera.conf] [--directive value ...] [-]`.
///
/// * `-v`/`--version` and `-h`/`--help` count only as the first argument.
/// * A first argument not starting with `-` is the config file (stored absolute in
///   `config_file`). A `-` first or last means "also read config text from stdin".
/// * Every `--name` starts a new config line `name "v1" "v2"…` (values quoted with Redis's
///   `sdscatrepr`); the lines are appended after the file and stdin, so they override them, and
///   errors report line numbers in that combined text, exactly as Redis does.
///
/// Errors: a file that cannot be read (Redis's "Fatal error, can't open config file" text), or
/// larger than [`MAX_CONFIG_BYTES`], or any config line error.
pub fn parse_cli(args: &[String]) -> Result<CliAction, ConfigError> {
    parse_cli_with(
        args,
        &|path: &Path| read_bounded(std::fs::File::open(path)?),
        &|| read_bounded(io::stdin().lock()),
    )
}

/// Reads at most `MAX_CONFIG_BYTES + 1` bytes: one more than allowed, so the caller can tell
/// "too large" from "exactly at the limit".
fn read_bounded(reader: impl Read) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    reader.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut buf)?;
    Ok(buf)
}

/// `strerror`-style text: Rust's io::Error appends " (os error N)", C's strerror does not.
pub(crate) fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) if e.raw_os_error().is_some() => s[..i].to_string(),
        _ => s,
    }
}

type ReadFile<'a> = &'a dyn Fn(&Path) -> io::Result<Vec<u8>>;
type ReadStdin<'a> = &'a dyn Fn() -> io::Result<Vec<u8>>;

/// [`parse_cli`] with its two inputs injected, so tests need neither files nor stdin.
pub(crate) fn parse_cli_with(
    args: &[String],
    read_file: ReadFile<'_>,
    read_stdin: ReadStdin<'_>,
) -> Result<CliAction, ConfigError> {
    match args.first().map(String::as_str) {
        Some("-v" | "--version") => return Ok(CliAction::Version(version_text())),
        Some("-h" | "--help") => return Ok(CliAction::Help(help_text())),
        _ => {}
    }
    let mut cfg = Config::default();
    let mut rest = args;
    if let Some(first) = args.first().filter(|a| !a.starts_with('-')) {
        let path = std::path::absolute(first).unwrap_or_else(|_| PathBuf::from(first));
        cfg.config_file = Some(path);
        rest = &args[1..];
    }

    // Redis's main(): turn the remaining arguments into config lines.
    let mut from_stdin = false;
    let mut options: Vec<u8> = Vec::new();
    let mut value_seen = true; // Redis's handled_last_config_arg
    for (j, arg) in rest.iter().enumerate() {
        let argv_index = j + args.len() - rest.len();
        if arg == "-" && (argv_index == 0 || argv_index == args.len() - 1) {
            from_stdin = true;
        } else if value_seen && arg.starts_with("--") {
            if !options.is_empty() {
                options.push(b'\n');
            }
            options.extend_from_slice(&arg.as_bytes()[2..]);
            options.push(b' ');
            // `--port` alone waits for its value; `"--port 6380"` carries it.
            value_seen = split_args(arg.as_bytes()).is_none_or(|w| w.len() != 1);
            // Redis 7.0.15's special case: `--save` followed by another
            // `--option`, or last, is `save ""` (no save rules).
            if !value_seen && arg.eq_ignore_ascii_case("--save") {
                match rest.get(j + 1) {
                    Some(next) if next.starts_with("--") => {
                        options.extend_from_slice(b"\"\"");
                        value_seen = true;
                    }
                    None => options.extend_from_slice(b"\"\""),
                    Some(_) => {}
                }
            }
        } else {
            cat_repr(&mut options, arg.as_bytes());
            options.push(b' ');
            value_seen = true;
        }
    }

    // Redis's loadServerConfig(): file, then stdin, then "\n" and the options.
    let mut text = Vec::new();
    if let Some(path) = &cfg.config_file {
        text = read_file(path).map_err(|e| {
            ConfigError::fatal(format!(
                "Fatal error, can't open config file '{}': {}",
                path.display(),
                io_reason(&e)
            ))
        })?;
    }
    if from_stdin {
        let bytes = read_stdin().map_err(|e| {
            ConfigError::fatal(format!(
                "Fatal error, can't read config from stdin: {}",
                io_reason(&e)
            ))
        })?;
        text.extend_from_slice(&bytes);
    }
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::fatal(format!(
            "Fatal error, config text is larger than {MAX_CONFIG_BYTES} bytes"
        )));
    }
    text.push(b'\n');
    text.extend_from_slice(&options);
    parse_config_bytes(&text, &mut cfg)?;
    Ok(CliAction::Run(Box::new(cfg)))
}

/// Usage text, like `redis-server --help`, followed by every directive and its default.
pub fn help_text() -> String {
    let mut s = String::from(
        "Usage: ./tessera [/path/to/tessera.conf] [options] [-]\n\
         \x20      ./tessera - (read config from stdin)\n\
         \x20      ./tessera -v or --version\n\
         \x20      ./tessera -h or --help\n\
         \n\
         Examples:\n\
         \x20      ./tessera (run the server with default conf)\n\
         \x20      echo 'maxmemory 128mb' | ./tessera -\n\
         \x20      ./tessera /etc/tessera/6379.conf\n\
         \x20      ./tessera --port 7777\n\
         \x20      ./tessera /etc/mytessera.conf --loglevel verbose -\n\
         \x20      ./tessera /etc/mytessera.conf --loglevel verbose\n\
         \n\
         Directives and their defaults (* = can be changed with CONFIG SET):\n",
    );
    let defaults = Config::default();
    for d in DIRECTIVES.iter().filter(|d| !d.hidden) {
        let value = String::from_utf8_lossy(&d.kind.get(&defaults)).into_owned();
        let value = if value.is_empty() {
            "\"\"".to_string()
        } else {
            value
        };
        let star = if d.runtime == Mutable { "*" } else { " " };
        let alias = d.alias.map(|a| format!(" (alias {a})")).unwrap_or_default();
        // A name of 29 characters or more still gets a space before its value.
        let gap = if d.name.len() >= 29 { " " } else { "" };
        s.push_str(&format!("     {star} {:<29}{gap}{value}{alias}\n", d.name));
    }
    s
}

/// One line like `redis-server --version`.
pub fn version_text() -> String {
    format!(
        "Tessera server v={VERSION} sha=00000000:0 malloc=libc bits={}",
        usize::BITS
    )
}

#[cfg(test)]
mod tests;
