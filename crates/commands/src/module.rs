//! MODULE, as a Redis 7.0.15 server with no modules loaded answers it.
//!
//! Tessera does not load Redis modules (they are C shared objects written
//! against Redis's internals). Tools probe for them all the same:
//! RedisInsight, redis-py's `module_list()` and client libraries that
//! check for RedisJSON or RediSearch send `MODULE LIST` on connect and stop
//! on an unknown-command error, while an empty list tells them no module
//! is there. So MODULE LIST answers the empty list, and LOAD, LOADEX and
//! UNLOAD fail exactly as Redis's do when the library cannot be opened or
//! no module has the name: the same errors, and for a load the reason in
//! the log (Redis logs `dlopen`'s). LOAD, LOADEX and UNLOAD are protected
//! commands: `enable-module-command` (default `no`, as Redis 7.0) decides
//! who may send them (see `admit`).

use resp::Args;

use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};

const ADMIN_ACL: &[&str] = &["admin", "slow", "dangerous"];
/// Redis's flags for LOAD, LOADEX and UNLOAD (`PROTECTED` is not printed).
const LOAD_FLAGS: u32 = ADMIN | NOSCRIPT | NO_ASYNC_LOADING | PROTECTED;

const MODULE: &[CommandSpec] = &[
    CommandSpec::new(
        "help",
        2,
        LOADING | STALE,
        NO_KEYS,
        Exec::Conn(help),
        &["slow"],
    ),
    CommandSpec::new(
        "list",
        2,
        ADMIN | NOSCRIPT,
        NO_KEYS,
        Exec::Conn(list),
        ADMIN_ACL,
    ),
    CommandSpec::new("load", -3, LOAD_FLAGS, NO_KEYS, Exec::Conn(load), ADMIN_ACL),
    CommandSpec::new(
        "loadex",
        -3,
        LOAD_FLAGS,
        NO_KEYS,
        Exec::Conn(load),
        ADMIN_ACL,
    ),
    CommandSpec::new(
        "unload",
        3,
        LOAD_FLAGS,
        NO_KEYS,
        Exec::Conn(unload),
        ADMIN_ACL,
    ),
];

pub(crate) const COMMANDS: &[CommandSpec] =
    &[CommandSpec::parent("module", -2, 0, &["slow"], MODULE)];

fn help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    crate::docs::reply_help(
        c.out,
        "MODULE",
        &[
            "LIST",
            "    Return a list of loaded modules.",
            "LOAD <path> [<arg> ...]",
            "    Load a module library from <path>, passing to it any optional arguments.",
            "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
            "    Load a module library from <path>, while passing it module configurations and optional arguments.",
            "UNLOAD <name>",
            "    Unload a module.",
        ],
    );
    Ok(())
}

/// MODULE LIST: no module is ever loaded.
fn list(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    c.out.array(0);
    Ok(())
}

/// MODULE LOAD path [arg ...] / LOADEX path [CONFIG name value ...]
/// [ARGS arg ...]: Redis's failure when the library cannot be loaded,
/// with the reason in the log.
fn load(_c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    crate::persist::log_warning(&format!(
        "Module {} failed to load: Tessera does not load Redis modules",
        String::from_utf8_lossy(args.get(2))
    ));
    Err(CmdError::err(
        "Error loading the extension. Please check the server logs.",
    ))
}

/// MODULE UNLOAD name: no module has any name.
fn unload(_c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    Err(CmdError::err(
        "Error unloading module: no such module with that name",
    ))
}

#[cfg(test)]
mod tests {
    use crate::testutil::TestServer;

    const LOAD_ERR: &str = "-ERR Error loading the extension. Please check the server logs.\r\n";

    #[test]
    fn module_answers_as_a_server_without_modules() {
        let mut t = TestServer::new(2);
        t.server.config.write().unwrap().enable_module_command = config::ProtectedAction::Yes;
        assert_eq!(t.run(&["MODULE", "LIST"]), "*0\r\n");
        assert_eq!(t.run(&["MODULE", "LOAD", "/x.so"]), LOAD_ERR);
        assert_eq!(t.run(&["MODULE", "LOAD", "/x.so", "a", "b"]), LOAD_ERR);
        assert_eq!(
            t.run(&["MODULE", "LOADEX", "/x.so", "CONFIG", "a", "b", "ARGS", "c"]),
            LOAD_ERR
        );
        assert_eq!(
            t.run(&["MODULE", "UNLOAD", "x"]),
            "-ERR Error unloading module: no such module with that name\r\n"
        );
        assert_eq!(
            t.run(&["MODULE", "UNLOAD"]),
            "-ERR wrong number of arguments for 'module|unload' command\r\n"
        );
        assert_eq!(
            t.run(&["MODULE", "LIST", "x"]),
            "-ERR wrong number of arguments for 'module|list' command\r\n"
        );
        assert_eq!(
            t.run(&["MODULE", "FOO"]),
            "-ERR unknown subcommand 'FOO'. Try MODULE HELP.\r\n"
        );
        assert!(t
            .run(&["MODULE", "HELP"])
            .starts_with("*11\r\n+MODULE <subcommand>"));
    }

    #[test]
    fn loading_is_protected_by_enable_module_command() {
        let mut t = TestServer::new(1);
        let refused =
            "-ERR MODULE command not allowed. If the enable-module-command option is set \
                       to \"local\", you can run it from a local connection, otherwise you need \
                       to set this option in the configuration file, and then restart the \
                       server.\r\n";
        assert_eq!(t.run(&["MODULE", "LOAD", "/x.so"]), refused);
        assert_eq!(t.run(&["MODULE", "LOADEX", "/x.so"]), refused);
        assert_eq!(t.run(&["MODULE", "UNLOAD", "x"]), refused);
        // LIST and HELP are not protected.
        assert_eq!(t.run(&["MODULE", "LIST"]), "*0\r\n");
    }
}
