//! Helpers shared by the unit tests of every module: the entry points driven from strings.

use std::io;
use std::path::Path;

use crate::cli::parse_cli_with;
use crate::*;

pub(crate) fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

pub(crate) fn no_file(_: &Path) -> io::Result<Vec<u8>> {
    Err(io::Error::from_raw_os_error(2))
}

pub(crate) fn no_stdin() -> io::Result<Vec<u8>> {
    panic!("stdin must not be read")
}

/// `parse_cli` without touching the disk: `file` is the content of any config file.
pub(crate) fn cli_with_file(a: &[&str], file: &str) -> Result<CliAction, ConfigError> {
    let content = file.as_bytes().to_vec();
    parse_cli_with(&strings(a), &|_| Ok(content.clone()), &no_stdin)
}

pub(crate) fn cli(a: &[&str]) -> Result<Config, ConfigError> {
    match parse_cli_with(&strings(a), &no_file, &no_stdin)? {
        CliAction::Run(cfg) => Ok(*cfg),
        other => panic!("expected Run, got {other:?}"),
    }
}

pub(crate) fn cli_err(a: &[&str]) -> String {
    cli(a).expect_err("must fail").to_string()
}

pub(crate) fn file(text: &str) -> Result<Config, ConfigError> {
    let mut cfg = Config::default();
    parse_config_text(text, &mut cfg).map(|()| cfg)
}

pub(crate) fn file_err(text: &str) -> String {
    file(text).expect_err("must fail").to_string()
}

/// Redis's fatal block, as `redis-server` 7.0.15 prints it (with our name and version).
pub(crate) fn fatal(line_no: usize, line: &str, reason: &str) -> String {
    format!(
        "\n*** FATAL CONFIG FILE ERROR (Tessera 0.1.0) ***\n\
         Reading the configuration file, at line {line_no}\n>>> '{line}'\n{reason}"
    )
}

pub(crate) fn get(cfg: &Config, patterns: &[&str]) -> Vec<(String, String)> {
    let patterns: Vec<&[u8]> = patterns.iter().map(|p| p.as_bytes()).collect();
    config_get(cfg, &patterns)
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
        .collect()
}

pub(crate) fn get_one(cfg: &Config, name: &str) -> String {
    let got = get(cfg, &[name]);
    assert_eq!(got.len(), 1, "{name}: {got:?}");
    got[0].1.clone()
}

pub(crate) fn set(cfg: &mut Config, pairs: &[(&str, &str)]) -> Result<(), String> {
    let pairs: Vec<(&[u8], &[u8])> = pairs
        .iter()
        .map(|(k, v)| (k.as_bytes(), v.as_bytes()))
        .collect();
    config_set(cfg, &pairs)
}
