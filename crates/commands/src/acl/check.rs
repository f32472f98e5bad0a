//! Whether a user may run one call: its command (bits or an allowed first
//! argument), its keys (patterns with read/write permissions against the
//! command's key specs) and its channels. Redis's `ACLCheckAllUserCommandPerm`:
//! the call passes if any selector allows all of it; otherwise the error
//! reported is the "most relevant" one (a channel over a key over the
//! command, then the later argument).

use std::sync::OnceLock;

use resp::Args;

use super::keyspec;
use super::rules::{Rules, Selector};
use crate::table::{flags, registry};

/// Why a call was refused; the position is the offending argument's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    Command,
    Key(usize),
    Channel(usize),
}

impl Denied {
    /// Redis's ACL_DENIED_* order for picking among selectors' errors.
    fn rank(self) -> u8 {
        match self {
            Denied::Command => 1,
            Denied::Key(_) => 2,
            Denied::Channel(_) => 4,
        }
    }
    fn pos(self) -> usize {
        match self {
            Denied::Command => 0,
            Denied::Key(p) | Denied::Channel(p) => p,
        }
    }
}

/// How a command names channels (Redis's `ACLDoesCommandHaveChannels`;
/// the unsubscribe commands name none).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Channels {
    None,
    /// PUBLISH / SPUBLISH: the first argument, matched against patterns.
    First,
    /// SUBSCRIBE / SSUBSCRIBE: every argument, matched against patterns.
    All,
    /// PSUBSCRIBE: every argument, equal to a pattern literally.
    AllLiteral,
}

fn channels_of(id: usize) -> Channels {
    static KINDS: OnceLock<Vec<Channels>> = OnceLock::new();
    KINDS.get_or_init(|| {
        registry()
            .specs
            .iter()
            .map(|(name, _, _)| match name.as_str() {
                "publish" | "spublish" => Channels::First,
                "subscribe" | "ssubscribe" => Channels::All,
                "psubscribe" => Channels::AllLiteral,
                _ => Channels::None,
            })
            .collect()
    })[id]
}

/// Whether the channel (or pattern, `literal`) is among `pats`.
pub fn channel_allowed(pats: &[Vec<u8>], ch: &[u8], literal: bool) -> bool {
    pats.iter().any(|p| {
        if literal {
            p == ch
        } else {
            ds::glob::glob_match(p, ch, false)
        }
    })
}

/// The keys of the call, found once for all selectors, in a buffer the
/// caller reuses (no allocation per call once it has grown).
struct KeyCache<'k> {
    found: bool,
    keys: &'k mut Vec<(usize, u8)>,
}

fn check_selector(
    s: &Selector,
    id: usize,
    args: Args<'_>,
    cache: &mut KeyCache<'_>,
) -> Result<(), Denied> {
    let reg = registry();
    let spec = reg.specs[id].1;
    if !s.allcommands && !spec.has(flags::NO_AUTH) && !s.bit(id) {
        let idx = if reg.specs[id].2.is_some() { 2 } else { 1 };
        let ok = args.len() >= 2
            && s.firstargs(id).is_some_and(|fa| {
                idx < args.len() && fa.iter().any(|a| a.eq_ignore_ascii_case(args.get(idx)))
            });
        if !ok {
            return Err(Denied::Command);
        }
    }
    if !s.allkeys && keyspec::has_keys(id) {
        if !cache.found {
            keyspec::keys(id, args, cache.keys);
            cache.found = true;
        }
        for &(pos, need) in cache.keys.iter() {
            let key = args.get(pos);
            let ok = s
                .keys
                .iter()
                .any(|(f, p)| f & need == need && ds::glob::glob_match(p, key, false));
            if !ok {
                return Err(Denied::Key(pos));
            }
        }
    }
    if !s.allchannels {
        let (range, literal) = match channels_of(id) {
            Channels::None => return Ok(()),
            Channels::First => (1..2.min(args.len()), false),
            Channels::All => (1..args.len(), false),
            Channels::AllLiteral => (1..args.len(), true),
        };
        for j in range {
            if !channel_allowed(&s.channels, args.get(j), literal) {
                return Err(Denied::Channel(j));
            }
        }
    }
    Ok(())
}

/// Whether a selector of `rules` allows this call of command `id` and
/// reads every key (all keys, or the pattern `*` with read permission):
/// Redis's `ACLUserCheckCmdWithUnrestrictedKeyAccess(.., CMD_KEY_ACCESS)`,
/// which SORT asks before a BY or GET pattern reads keys no key spec names.
pub fn reads_every_key(rules: &Rules, id: usize, args: Args<'_>) -> bool {
    let mut keys = Vec::new();
    let mut cache = KeyCache {
        found: false,
        keys: &mut keys,
    };
    rules.selectors.iter().any(|s| {
        check_selector(s, id, args, &mut cache).is_ok()
            && (s.allkeys
                || s.keys
                    .iter()
                    .any(|(f, p)| f & super::rules::KEY_READ != 0 && p == b"*"))
    })
}

/// Checks one call of command `id` against `rules`; `keys` is scratch
/// space for the call's keys.
pub fn check(
    rules: &Rules,
    id: usize,
    args: Args<'_>,
    keys: &mut Vec<(usize, u8)>,
) -> Result<(), Denied> {
    let mut cache = KeyCache { found: false, keys };
    let mut worst = Denied::Command;
    for s in &rules.selectors {
        match check_selector(s, id, args, &mut cache) {
            Ok(()) => return Ok(()),
            Err(d) => {
                if d.rank() > worst.rank() || (d.rank() == worst.rank() && d.pos() > worst.pos()) {
                    worst = d;
                }
            }
        }
    }
    Err(worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use resp::OwnedArgs;

    fn run(rules: &[&str], argv: &[&str]) -> Result<(), Denied> {
        let mut r = Rules::new(false);
        for op in rules {
            r.apply(op.as_bytes(), false).unwrap();
        }
        let owned = OwnedArgs::from_slices(
            &argv
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        );
        let res = registry().resolve(owned.args()).unwrap();
        check(&r, res.id, owned.args(), &mut Vec::new())
    }

    #[test]
    fn commands_keys_and_channels() {
        let u = [
            "+get",
            "+set",
            "~a*",
            "%R~r*",
            "&ch*",
            "+publish",
            "+psubscribe",
        ];
        assert_eq!(run(&u, &["get", "a1"]), Ok(()));
        assert_eq!(run(&u, &["get", "r1"]), Ok(()));
        assert_eq!(run(&u, &["set", "r1", "v"]), Err(Denied::Key(1)));
        assert_eq!(run(&u, &["get", "b"]), Err(Denied::Key(1)));
        assert_eq!(run(&u, &["hget", "a", "f"]), Err(Denied::Command));
        assert_eq!(run(&u, &["publish", "chan", "m"]), Ok(()));
        assert_eq!(run(&u, &["publish", "x", "m"]), Err(Denied::Channel(1)));
        // PSUBSCRIBE needs the pattern itself among the user's patterns.
        assert_eq!(run(&u, &["psubscribe", "ch*"]), Ok(()));
        assert_eq!(run(&u, &["psubscribe", "chx"]), Err(Denied::Channel(1)));
        // AUTH-class commands need no bit.
        assert_eq!(run(&u, &["auth", "p"]), Ok(()));
    }

    #[test]
    fn selectors_and_first_args() {
        let u = ["+get", "~a*", "(+set ~b*)", "+select|0"];
        assert_eq!(run(&u, &["set", "b", "v"]), Ok(()));
        // Neither selector: the key error outranks the command error.
        assert_eq!(run(&u, &["set", "a", "v"]), Err(Denied::Key(1)));
        assert_eq!(run(&u, &["select", "0"]), Ok(()));
        assert_eq!(run(&u, &["select", "1"]), Err(Denied::Command));
        assert_eq!(run(&["+client|id"], &["client", "id"]), Ok(()));
        assert_eq!(
            run(&["+client|id"], &["client", "list"]),
            Err(Denied::Command)
        );
    }
}
