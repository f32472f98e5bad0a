//! `redis.acl_check_cmd`: whether the script's caller may run a call.

use mlua::{MultiValue, Value};

use super::*;

impl Run<'_, '_> {
    /// `redis.acl_check_cmd(cmd, args...)`: whether the script's caller
    /// may run that call. The command is found as Redis's `lookupCommand`
    /// finds it (no arity check); an unknown one raises.
    pub(super) fn acl_check_cmd(&self, args: MultiValue) -> mlua::Result<(Value, bool)> {
        if args.is_empty() {
            return Err(reply_error(
                b"Please specify at least one argument for this redis lib call",
            ));
        }
        let mut argv = resp::OwnedArgs::default();
        for a in &args {
            match a {
                Value::String(s) => argv.push(&s.as_bytes()),
                Value::Integer(n) => argv.push(itoa::Buffer::new().format(*n).as_bytes()),
                Value::Number(n) => argv.push(resp::format_double(*n).as_bytes()),
                _ => {
                    return Err(reply_error(
                        b"Lua redis lib command arguments must be strings or integers",
                    ))
                }
            }
        }
        let args = argv.args();
        let reg = registry();
        let Some(id) = super::command_id(args) else {
            return Err(reply_error(
                b"Invalid command passed to redis.acl_check_cmd()",
            ));
        };
        // A call of the wrong arity has no keys to check (and key
        // extraction assumes the arity): a restricted user is refused it,
        // which is Redis's answer for most (SET; not GET).
        let ok = match &self.ctx.caller {
            Some(caller) => reg.specs[id].1.arity_ok(args.len()) && caller.allows(id, args),
            None => true,
        };
        Ok((Value::Boolean(ok), false))
    }
}
