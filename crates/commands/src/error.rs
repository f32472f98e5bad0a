//! The client-visible errors of every command, in one place. `Display` is
//! the exact line Redis 7 sends (without the leading `-` and the CRLF);
//! each variant's bytes are asserted in the tests below. Handlers return
//! `Result<_, CmdError>` and use `?` where Redis uses its `...OrReply`
//! helpers.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdError {
    /// `name` as the client sent it, and the following arguments.
    UnknownCommand {
        name: Vec<u8>,
        args: Vec<Vec<u8>>,
    },
    /// `parent` upper-cased as Redis prints it in "Try X HELP".
    UnknownSubcommand {
        sub: Vec<u8>,
        parent: String,
    },
    /// Full command name, e.g. `get` or `client|setname`.
    WrongArity(String),
    Syntax,
    WrongType,
    NotInteger,
    NotFloat,
    Overflow,
    NoSuchKey,
    /// The command name, e.g. `set`, `expire`.
    InvalidExpire(String),
    DbIndexOutOfRange,
    InvalidDbIndex,
    NoAuth,
    WrongPass,
    /// ACL: the user may not run this command (its full name).
    NoPermCommand(String),
    /// ACL: a key argument is outside the user's patterns.
    NoPermKey,
    /// ACL: a channel argument is outside the user's patterns.
    NoPermChannel,
    /// A string that is not a HyperLogLog where one is expected.
    NotHll,
    /// A HyperLogLog whose registers do not decode (`INVALIDOBJ`).
    CorruptHll,
    /// `ERR ...`: any other error whose text starts with ERR.
    Err(String),
    /// An error line with its own code (e.g. `NOPROTO ...`).
    Raw(String),
    /// A whole error line as raw bytes, for messages that echo client
    /// bytes: Redis copies them as they are, valid UTF-8 or not.
    Bytes(Vec<u8>),
    /// A script's error reply whose error was counted already, when the
    /// `redis.call` that raised it ran or was rejected (Redis's
    /// `ignore_error_stats_update`): replied as [`CmdError::Bytes`], it
    /// counts as the script's failed call but not again in INFO errorstats.
    Counted(Vec<u8>),
    /// A command refused before it ran, as Redis's processCommand refuses
    /// one (a script's up-front OOM or NOREPLICAS): it counts in
    /// `rejected_calls` and INFO errorstats, not as a call.
    Rejected(String),
}

impl CmdError {
    pub fn err(msg: impl Into<String>) -> Self {
        CmdError::Err(msg.into())
    }

    /// `ERR {before}{arg}{after}` with `arg` echoed as Redis's `%s` prints
    /// it: raw bytes up to the first NUL.
    pub fn err_echo(before: &str, arg: &[u8], after: &str) -> Self {
        let mut line = Vec::with_capacity(4 + before.len() + arg.len() + after.len());
        line.extend_from_slice(b"ERR ");
        line.extend_from_slice(before.as_bytes());
        line.extend_from_slice(c_str(arg));
        line.extend_from_slice(after.as_bytes());
        CmdError::Bytes(line)
    }

    /// The error line as sent (without `-` and CRLF), byte-exact.
    pub fn line(&self) -> Vec<u8> {
        match self {
            CmdError::UnknownCommand { name, args } => {
                // Redis: "'%.*s' " per argument while the list is < 128 bytes,
                // each cut to what is left of 128.
                let mut list = Vec::new();
                for a in args {
                    if list.len() >= 128 {
                        break;
                    }
                    let room = 128 - list.len();
                    list.push(b'\'');
                    list.extend_from_slice(c_str(&a[..a.len().min(room)]));
                    list.extend_from_slice(b"' ");
                }
                let mut line = b"ERR unknown command '".to_vec();
                line.extend_from_slice(c_str(&name[..name.len().min(128)]));
                line.extend_from_slice(b"', with args beginning with: ");
                line.extend_from_slice(&list);
                line
            }
            CmdError::UnknownSubcommand { sub, parent } => {
                let mut line = b"ERR unknown subcommand '".to_vec();
                line.extend_from_slice(c_str(&sub[..sub.len().min(128)]));
                line.extend_from_slice(format!("'. Try {parent} HELP.").as_bytes());
                line
            }
            CmdError::Bytes(b) | CmdError::Counted(b) => b.clone(),
            other => other.to_string().into_bytes(),
        }
    }
}

/// Formats bytes as Redis's `%s` does for client-supplied strings: a C
/// string, so it ends at the first NUL byte.
fn c_str(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::UnknownCommand { .. }
            | CmdError::UnknownSubcommand { .. }
            | CmdError::Bytes(_)
            | CmdError::Counted(_) => f.write_str(&String::from_utf8_lossy(&self.line())),
            CmdError::Rejected(line) => f.write_str(line),
            CmdError::WrongArity(name) => {
                write!(f, "ERR wrong number of arguments for '{name}' command")
            }
            CmdError::Syntax => f.write_str("ERR syntax error"),
            CmdError::WrongType => {
                f.write_str("WRONGTYPE Operation against a key holding the wrong kind of value")
            }
            CmdError::NotInteger => f.write_str("ERR value is not an integer or out of range"),
            CmdError::NotFloat => f.write_str("ERR value is not a valid float"),
            CmdError::Overflow => f.write_str("ERR increment or decrement would overflow"),
            CmdError::NoSuchKey => f.write_str("ERR no such key"),
            CmdError::InvalidExpire(cmd) => write!(f, "ERR invalid expire time in '{cmd}' command"),
            CmdError::DbIndexOutOfRange => f.write_str("ERR DB index is out of range"),
            CmdError::InvalidDbIndex => f.write_str("ERR invalid DB index"),
            CmdError::NoAuth => f.write_str("NOAUTH Authentication required."),
            CmdError::WrongPass => {
                f.write_str("WRONGPASS invalid username-password pair or user is disabled.")
            }
            CmdError::NoPermCommand(name) => write!(
                f,
                "NOPERM this user has no permissions to run the '{name}' command"
            ),
            CmdError::NoPermKey => f.write_str(
                "NOPERM this user has no permissions to access one of the keys used as arguments",
            ),
            CmdError::NoPermChannel => f.write_str(
                "NOPERM this user has no permissions to access one of the channels used as \
                 arguments",
            ),
            CmdError::NotHll => {
                f.write_str("WRONGTYPE Key is not a valid HyperLogLog string value.")
            }
            CmdError::CorruptHll => f.write_str("INVALIDOBJ Corrupted HLL object detected"),
            CmdError::Err(m) => write!(f, "ERR {m}"),
            CmdError::Raw(m) => f.write_str(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        let unknown = CmdError::UnknownCommand {
            name: b"foo".to_vec(),
            args: vec![b"a".to_vec(), b"b c".to_vec()],
        };
        assert_eq!(
            unknown.to_string(),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b c' "
        );
        let none = CmdError::UnknownCommand {
            name: b"foo".to_vec(),
            args: vec![],
        };
        assert_eq!(
            none.to_string(),
            "ERR unknown command 'foo', with args beginning with: "
        );
        assert_eq!(
            CmdError::UnknownSubcommand {
                sub: b"x".to_vec(),
                parent: "CLIENT".into()
            }
            .to_string(),
            "ERR unknown subcommand 'x'. Try CLIENT HELP."
        );
        assert_eq!(
            CmdError::WrongArity("get".into()).to_string(),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(CmdError::Syntax.to_string(), "ERR syntax error");
        assert_eq!(
            CmdError::WrongType.to_string(),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        assert_eq!(
            CmdError::NotInteger.to_string(),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            CmdError::NotFloat.to_string(),
            "ERR value is not a valid float"
        );
        assert_eq!(
            CmdError::Overflow.to_string(),
            "ERR increment or decrement would overflow"
        );
        assert_eq!(CmdError::NoSuchKey.to_string(), "ERR no such key");
        assert_eq!(
            CmdError::InvalidExpire("set".into()).to_string(),
            "ERR invalid expire time in 'set' command"
        );
        assert_eq!(
            CmdError::DbIndexOutOfRange.to_string(),
            "ERR DB index is out of range"
        );
        assert_eq!(
            CmdError::NoAuth.to_string(),
            "NOAUTH Authentication required."
        );
        assert_eq!(
            CmdError::NotHll.to_string(),
            "WRONGTYPE Key is not a valid HyperLogLog string value."
        );
        assert_eq!(
            CmdError::CorruptHll.to_string(),
            "INVALIDOBJ Corrupted HLL object detected"
        );
        assert_eq!(
            CmdError::NoPermCommand("client|list".into()).to_string(),
            "NOPERM this user has no permissions to run the 'client|list' command"
        );
        assert_eq!(
            CmdError::NoPermKey.to_string(),
            "NOPERM this user has no permissions to access one of the keys used as arguments"
        );
        assert_eq!(
            CmdError::NoPermChannel.to_string(),
            "NOPERM this user has no permissions to access one of the channels used as arguments"
        );
        assert_eq!(CmdError::err("x y").to_string(), "ERR x y");
        assert_eq!(CmdError::Raw("NOPROTO x".into()).to_string(), "NOPROTO x");
    }
}
