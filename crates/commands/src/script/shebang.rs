//! The `#!lua` first line of a script (Redis 7.0's `evalExtractShebangFlags`):
//! `#!lua flags=no-writes,allow-oom ...`. A script without one runs with
//! the legacy defaults (it may write, OOM is checked per command); with one,
//! only the flags it names are set and the OOM check happens up front.

/// What a script's shebang declares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    /// The script opened with `#!lua` (flags are then exactly those named).
    pub shebang: bool,
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot_keys: bool,
}

/// Parses the shebang of `body`. Returns the flags and the length of the
/// shebang line without its newline (0 when there is none): the body
/// compiles from there, so line numbers stay those of the whole text.
/// Errors are Redis's lines (without the `ERR ` code).
pub fn parse(body: &[u8]) -> Result<(ScriptFlags, usize), String> {
    let mut flags = ScriptFlags::default();
    if !body.starts_with(b"#!") {
        return Ok((flags, 0));
    }
    let Some(end) = body.iter().position(|&c| c == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let line = &body[..end];
    let mut parts = line
        .split(|&c| c == b' ' || c == b'\t' || c == b'\r')
        .filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or_default();
    if engine != b"#!lua" {
        return Err(format!(
            "Unexpected engine in script shebang: {}",
            String::from_utf8_lossy(engine)
        ));
    }
    flags.shebang = true;
    for part in parts {
        let Some(list) = part.strip_prefix(b"flags=") else {
            return Err(format!(
                "Unknown lua shebang option: {}",
                String::from_utf8_lossy(part)
            ));
        };
        for f in list.split(|&c| c == b',').filter(|f| !f.is_empty()) {
            match f {
                b"no-writes" => flags.no_writes = true,
                b"allow-oom" => flags.allow_oom = true,
                b"allow-stale" => flags.allow_stale = true,
                b"no-cluster" => flags.no_cluster = true,
                b"allow-cross-slot-keys" => flags.allow_cross_slot_keys = true,
                _ => {
                    return Err(format!(
                        "Unexpected flag in script shebang: {}",
                        String::from_utf8_lossy(f)
                    ))
                }
            }
        }
    }
    Ok((flags, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_shebang_is_the_legacy_default() {
        assert_eq!(parse(b"return 1"), Ok((ScriptFlags::default(), 0)));
        assert_eq!(parse(b"#return 1"), Ok((ScriptFlags::default(), 0)));
    }

    #[test]
    fn flags_and_errors_as_redis() {
        let (f, n) = parse(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.shebang && f.no_writes && f.allow_oom && !f.allow_stale);
        assert_eq!(n, 31);
        let (f, _) = parse(b"#!lua\nreturn 1").unwrap();
        assert_eq!(
            f,
            ScriptFlags {
                shebang: true,
                ..Default::default()
            }
        );
        let (f, _) = parse(b"#!lua flags=\nx").unwrap();
        assert!(f.shebang && !f.no_writes);
        let (f, _) = parse(b"#!lua flags=no-writes flags=allow-stale,no-cluster\nx").unwrap();
        assert!(f.no_writes && f.allow_stale && f.no_cluster);
        assert_eq!(parse(b"#!lua"), Err("Invalid script shebang".into()));
        assert_eq!(
            parse(b"#!luax\n"),
            Err("Unexpected engine in script shebang: #!luax".into())
        );
        assert_eq!(
            parse(b"#!lua name=foo\n"),
            Err("Unknown lua shebang option: name=foo".into())
        );
        assert_eq!(
            parse(b"#!lua flags=no-writes,bad\n"),
            Err("Unexpected flag in script shebang: bad".into())
        );
    }
}
