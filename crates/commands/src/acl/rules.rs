//! One user's ACL rules: flags, password hashes and selectors, the
//! operations of ACL SETUSER that change them (Redis's `ACLSetUser` /
//! `ACLSetSelector`), and their description in ACL LIST's format
//! (`ACLDescribeUser`).
//!
//! A [`Rules`] value is immutable once published: ACL SETUSER builds a new
//! one from a copy (so a bad modifier changes nothing, as Redis's staged
//! `tempu`), and the user's handle swaps it in (`users::User`). Checks run
//! against a snapshot and never take a lock per key.
//!
//! Commands are bits over the registry's dense ids; the extra `future` bit
//! is Redis's reserved last bit: set only by `+@all`/`allcommands`, it is
//! what makes ACL LIST start a description with `+@all` rather than `-@all`.

use crate::table::registry;

use super::cats;

/// Key pattern permissions (`%R~`, `%W~`, `~` = both).
pub const KEY_READ: u8 = 1;
pub const KEY_WRITE: u8 = 2;
pub const KEY_ALL: u8 = KEY_READ | KEY_WRITE;

/// User flags, in the order ACL LIST and GETUSER print them.
const FLAGS: [(u8, &str); 5] = [
    (ENABLED, "on"),
    (DISABLED, "off"),
    (NOPASS, "nopass"),
    (SKIP_SANITIZE, "skip-sanitize-payload"),
    (SANITIZE, "sanitize-payload"),
];
const ENABLED: u8 = 1;
const DISABLED: u8 = 2;
const NOPASS: u8 = 4;
const SKIP_SANITIZE: u8 = 8;
const SANITIZE: u8 = 16;

/// Why an ACL rule was refused (Redis's errno values in `ACLSetUser`);
/// [`RuleError::text`] is Redis's `ACLSetUserStringError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleError {
    /// ENOENT
    UnknownName,
    /// EINVAL
    Syntax,
    /// EEXIST
    KeyAfterAll,
    /// EISDIR
    ChannelAfterAll,
    /// ENODEV
    NoSuchPassword,
    /// EBADMSG
    BadHash,
    /// ECHILD
    FirstArgOfSub,
}

impl RuleError {
    pub fn text(self) -> &'static str {
        match self {
            RuleError::UnknownName => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeyAfterAll => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and \
                 does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::ChannelAfterAll => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid \
                 and does not have any effect. Try 'resetchannels' to start with an empty list \
                 of channels"
            }
            RuleError::NoSuchPassword => {
                "The password you are trying to remove from the user does not exist"
            }
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase \
                 hexadecimal characters"
            }
            RuleError::FirstArgOfSub => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// What a selector allows: commands, key patterns, channel patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub root: bool,
    pub allkeys: bool,
    pub allchannels: bool,
    /// Every command, checked without the bits (Redis's
    /// SELECTOR_FLAG_ALLCOMMANDS: cleared by any command removed).
    pub allcommands: bool,
    /// Redis's reserved bit: `+@all` was the last word on all commands.
    future: bool,
    cmds: Vec<u64>,
    /// `+cmd|arg`: first arguments allowed for a command whose bit is off.
    firstargs: Vec<(usize, Vec<Vec<u8>>)>,
    pub keys: Vec<(u8, Vec<u8>)>,
    pub channels: Vec<Vec<u8>>,
}

impl Selector {
    fn new(root: bool, pubsub_all: bool) -> Self {
        Selector {
            root,
            allkeys: false,
            allchannels: pubsub_all,
            allcommands: false,
            future: false,
            cmds: vec![0; registry().len().div_ceil(64)],
            firstargs: Vec::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// Whether command `id`'s bit is set.
    #[inline]
    pub fn bit(&self, id: usize) -> bool {
        self.cmds[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.cmds[id / 64] |= 1 << (id % 64);
        } else {
            self.cmds[id / 64] &= !(1 << (id % 64));
            self.allcommands = false;
        }
    }

    /// First arguments allowed for `id` when its bit is off.
    pub fn firstargs(&self, id: usize) -> Option<&[Vec<u8>]> {
        self.firstargs
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.as_slice())
    }

    /// Redis's `ACLChangeSelectorPerm`: a container's subcommands follow it.
    fn change(&mut self, id: usize, on: bool) {
        self.set_bit(id, on);
        self.firstargs.retain(|(i, _)| *i != id);
        for sub in registry().children(id) {
            self.set_bit(sub, on);
        }
    }

    /// `+@cat` / `-@cat` (Redis's `ACLSetSelectorCommandBitsForCategory`).
    fn change_category(&mut self, bit: u32, on: bool) {
        let reg = registry();
        for id in 0..reg.len() {
            if reg.cats[id] & bit != 0 {
                self.change(id, on);
            }
        }
    }

    fn all_commands(&mut self, on: bool) {
        let fill = if on { u64::MAX } else { 0 };
        self.cmds.iter_mut().for_each(|w| *w = fill);
        self.allcommands = on;
        self.future = on;
        self.firstargs.clear();
    }

    /// Applies one selector rule (Redis's `ACLSetSelector`).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        let at = |i: usize| op.get(i).copied().unwrap_or(0);
        if is("allkeys") || is("~*") {
            self.allkeys = true;
            self.keys.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.keys.clear();
        } else if is("allchannels") || is("&*") {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.all_commands(true);
        } else if is("nocommands") || is("-@all") {
            self.all_commands(false);
        } else if at(0) == b'~' || at(0) == b'%' {
            if self.allkeys {
                return Err(RuleError::KeyAfterAll);
            }
            let mut flags = 0;
            let mut off = 1;
            if at(0) == b'%' {
                while let Some(&c) = op.get(off) {
                    if c.eq_ignore_ascii_case(&b'r') && flags & KEY_READ == 0 {
                        flags |= KEY_READ;
                    } else if c.eq_ignore_ascii_case(&b'w') && flags & KEY_WRITE == 0 {
                        flags |= KEY_WRITE;
                    } else if c == b'~' {
                        off += 1;
                        break;
                    } else {
                        return Err(RuleError::Syntax);
                    }
                    off += 1;
                }
                // `%~` and `%` name no permission (Redis's `!flags`).
                if flags == 0 {
                    return Err(RuleError::Syntax);
                }
            } else {
                flags = KEY_ALL;
            }
            let pat = op.get(off..).unwrap_or_default();
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            match self.keys.iter_mut().find(|(_, p)| p == pat) {
                Some((f, _)) => *f |= flags,
                None => self.keys.push((flags, pat.to_vec())),
            }
            self.allkeys = false;
        } else if at(0) == b'&' {
            if self.allchannels {
                return Err(RuleError::ChannelAfterAll);
            }
            let pat = &op[1..];
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|p| p == pat) {
                self.channels.push(pat.to_vec());
            }
            self.allchannels = false;
        } else if at(0) == b'+' && at(1) != b'@' {
            self.allow(&op[1..])?;
        } else if at(0) == b'-' && at(1) != b'@' {
            let id = registry()
                .lookup_full(&op[1..])
                .ok_or(RuleError::UnknownName)?;
            self.change(id, false);
        } else if (at(0) == b'+' || at(0) == b'-') && at(1) == b'@' {
            let bit = cats::bit(&op[2..]).ok_or(RuleError::UnknownName)?;
            self.change_category(bit, at(0) == b'+');
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// `+name`, `+cmd|sub` or `+cmd|first-arg`.
    fn allow(&mut self, name: &[u8]) -> Result<(), RuleError> {
        let reg = registry();
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let id = reg.lookup_full(name).ok_or(RuleError::UnknownName)?;
            self.change(id, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let id = reg.lookup_full(base).ok_or(RuleError::UnknownName)?;
        if reg.specs[id].2.is_some() {
            return Err(RuleError::FirstArgOfSub);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !reg.specs[id].1.subcommands.is_empty() {
            let sid = reg.lookup_full(name).ok_or(RuleError::UnknownName)?;
            self.change(sid, true);
            return Ok(());
        }
        crate::persist::log_warning(&format!(
            "Deprecation warning: Allowing a first arg of an otherwise blocked command is a \
             misuse of ACL and may get disabled in the future (offender: +{})",
            String::from_utf8_lossy(name)
        ));
        match self.firstargs.iter_mut().find(|(i, _)| *i == id) {
            Some((_, v)) => {
                if !v.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                    v.push(sub.to_vec());
                }
            }
            None => self.firstargs.push((id, vec![sub.to_vec()])),
        }
        Ok(())
    }

    /// Keys, channels and commands in ACL LIST's format (`ACLDescribeSelector`).
    fn describe(&self, out: &mut Vec<u8>) {
        if self.allkeys {
            out.extend_from_slice(b"~* ");
        } else {
            for (f, p) in &self.keys {
                pattern(out, *f, p);
                out.push(b' ');
            }
        }
        if self.allchannels {
            out.extend_from_slice(b"&* ");
        } else {
            out.extend_from_slice(b"resetchannels ");
            for p in &self.channels {
                out.push(b'&');
                out.extend_from_slice(p);
                out.push(b' ');
            }
        }
        out.extend_from_slice(&self.describe_commands());
    }

    /// The command rules that rebuild this selector's bits, starting from
    /// `+@all` or `-@all` and approximating with categories before single
    /// commands (Redis's `ACLDescribeSelectorCommandRules`).
    pub fn describe_commands(&self) -> Vec<u8> {
        let reg = registry();
        let additive = !self.future;
        let mut rules: Vec<u8> = Vec::new();
        let mut fake = Selector::new(false, false);
        if additive {
            rules.extend_from_slice(b"-@all ");
            fake.all_commands(false);
        } else {
            rules.extend_from_slice(b"+@all ");
            fake.all_commands(true);
        }
        let mut temp = self.clone();
        let mut applied = [false; cats::NAMES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for (j, done) in applied.iter().enumerate() {
                if *done {
                    continue;
                }
                let bit = 1u32 << j;
                let (mut on, mut off) = (0, 0);
                for id in 0..reg.len() {
                    if reg.cats[id] & bit != 0 {
                        if temp.bit(id) {
                            on += 1;
                        } else {
                            off += 1;
                        }
                    }
                }
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            let bit = 1u32 << j;
            fake.change_category(bit, additive);
            temp.change_category(bit, !additive);
            rules.extend_from_slice(if additive { b"+@" } else { b"-@" });
            rules.extend_from_slice(cats::NAMES[j].as_bytes());
            rules.push(b' ');
            applied[j] = true;
        }
        for id in 0..reg.len() {
            let user = self.bit(id);
            if user != fake.bit(id) {
                rules.push(if user { b'+' } else { b'-' });
                rules.extend_from_slice(reg.specs[id].0.as_bytes());
                rules.push(b' ');
                fake.change(id, user);
            }
            if !user {
                for a in self.firstargs(id).unwrap_or_default() {
                    rules.push(b'+');
                    rules.extend_from_slice(reg.specs[id].0.as_bytes());
                    rules.push(b'|');
                    rules.extend_from_slice(a);
                    rules.push(b' ');
                }
            }
        }
        rules.pop();
        rules
    }

    /// ACL GETUSER's `keys` field.
    pub fn keys_text(&self) -> Vec<u8> {
        if self.allkeys {
            return b"~*".to_vec();
        }
        let mut out = Vec::new();
        for (i, (f, p)) in self.keys.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            pattern(&mut out, *f, p);
        }
        out
    }

    /// ACL GETUSER's `channels` field.
    pub fn channels_text(&self) -> Vec<u8> {
        if self.allchannels {
            return b"&*".to_vec();
        }
        let mut out = Vec::new();
        for (i, p) in self.channels.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.push(b'&');
            out.extend_from_slice(p);
        }
        out
    }
}

fn pattern(out: &mut Vec<u8>, flags: u8, p: &[u8]) {
    out.extend_from_slice(match flags {
        KEY_READ => b"%R~".as_slice(),
        KEY_WRITE => b"%W~",
        _ => b"~",
    });
    out.extend_from_slice(p);
}

/// Redis's `ACLStringHasSpaces`: whitespace or NUL.
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&b| b == 0 || b == b' ' || (b'\t'..=b'\r').contains(&b))
}

/// A user's complete rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    flags: u8,
    /// SHA-256 hex of each password, in insertion order.
    pub passwords: Vec<String>,
    /// The root selector first, then `(...)` selectors in order.
    pub selectors: Vec<Selector>,
}

impl Rules {
    /// A new user: off, no passwords, no commands or keys; channels as
    /// `acl-pubsub-default` says.
    pub fn new(pubsub_all: bool) -> Self {
        Rules {
            flags: DISABLED,
            passwords: Vec::new(),
            selectors: vec![Selector::new(true, pubsub_all)],
        }
    }

    /// Redis's default user: `on nopass ~* &* +@all`.
    pub fn default_user() -> Self {
        let mut r = Rules::new(false);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            // INVARIANT: fixed, valid rules.
            r.apply(op.as_bytes(), false).expect("valid default rules");
        }
        r
    }

    pub fn enabled(&self) -> bool {
        self.flags & ENABLED != 0
    }
    pub fn nopass(&self) -> bool {
        self.flags & NOPASS != 0
    }

    /// Whether some selector allows everything: no check can fail.
    pub fn unrestricted(&self) -> bool {
        self.selectors
            .iter()
            .any(|s| s.allcommands && s.allkeys && s.allchannels)
    }

    /// Applies one ACL SETUSER modifier (Redis's `ACLSetUser`); selectors
    /// come merged into one `(...)` argument.
    pub fn apply(&mut self, op: &[u8], pubsub_all: bool) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("on") {
            self.flags = (self.flags | ENABLED) & !DISABLED;
        } else if is("off") {
            self.flags = (self.flags | DISABLED) & !ENABLED;
        } else if is("skip-sanitize-payload") {
            self.flags = (self.flags | SKIP_SANITIZE) & !SANITIZE;
        } else if is("sanitize-payload") {
            self.flags = (self.flags | SANITIZE) & !SKIP_SANITIZE;
        } else if is("nopass") {
            self.flags |= NOPASS;
            self.passwords.clear();
        } else if is("resetpass") {
            self.flags &= !NOPASS;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' {
                super::sha256::hex(&op[1..])
            } else {
                valid_hash(&op[1..])?
            };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.flags &= !NOPASS;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' {
                super::sha256::hex(&op[1..])
            } else {
                valid_hash(&op[1..])?
            };
            let i = self
                .passwords
                .iter()
                .position(|p| *p == hash)
                .ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(i);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let mut s = Selector::new(false, pubsub_all);
            let inner = &op[1..op.len() - 1];
            // Unbalanced quotes inside make an empty selector (Redis's
            // sdssplitargs returns nothing).
            for w in config::split_args(inner).unwrap_or_default() {
                s.apply(&w)?;
            }
            self.selectors.push(s);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            for op in ["resetpass", "resetkeys", "resetchannels"] {
                self.apply(op.as_bytes(), pubsub_all)?;
            }
            if pubsub_all {
                self.apply(b"allchannels", pubsub_all)?;
            }
            for op in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                self.apply(op.as_bytes(), pubsub_all)?;
            }
        } else {
            self.selectors[0].apply(op)?;
        }
        Ok(())
    }

    /// Checks a password against the user's hashes, looking at every hash
    /// with a constant-time comparison (Redis's `time_independent_strcmp`).
    pub fn password_ok(&self, pass: &[u8]) -> bool {
        if self.nopass() {
            return true;
        }
        let hash = super::sha256::hex(pass);
        let mut ok = false;
        for p in &self.passwords {
            ok |= constant_time_eq(p.as_bytes(), hash.as_bytes());
        }
        ok
    }

    /// The user's flags as GETUSER lists them.
    pub fn flag_names(&self) -> Vec<&'static str> {
        FLAGS
            .iter()
            .filter(|(f, _)| self.flags & f != 0)
            .map(|(_, n)| *n)
            .collect()
    }

    /// ACL LIST's description (without `user <name> `).
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for name in self.flag_names() {
            out.extend_from_slice(name.as_bytes());
            out.push(b' ');
        }
        for p in &self.passwords {
            out.push(b'#');
            out.extend_from_slice(p.as_bytes());
            out.push(b' ');
        }
        for s in &self.selectors {
            if s.root {
                s.describe(&mut out);
            } else {
                out.extend_from_slice(b" (");
                s.describe(&mut out);
                out.push(b')');
            }
        }
        out
    }
}

/// Equal bytes, compared without an early exit (the lengths here are
/// both 64: hex SHA-256).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (x, y) in a.iter().zip(b) {
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

fn valid_hash(h: &[u8]) -> Result<String, RuleError> {
    if h.len() != 64
        || !h
            .iter()
            .all(|&c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return Err(RuleError::BadHash);
    }
    Ok(String::from_utf8_lossy(h).into_owned())
}

/// Redis's `ACLMergeSelectorArguments`: a selector spread over several
/// arguments (`(~a` `+get)`) becomes one. `Err(i)`: the argument at `i`
/// opens a selector that never closes.
pub fn merge_selectors(args: &[&[u8]]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out = Vec::with_capacity(args.len());
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (j, op) in args.iter().enumerate() {
        if let Some((_, sel)) = &mut open {
            sel.push(b' ');
            sel.extend_from_slice(op);
            if op.last() == Some(&b')') {
                let (_, sel) = open.take().unwrap_or_default();
                out.push(sel);
            }
            continue;
        }
        if op.first() == Some(&b'(') && op.last() != Some(&b')') {
            open = Some((j, op.to_vec()));
            continue;
        }
        out.push(op.to_vec());
    }
    match open {
        Some((j, _)) => Err(j),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(ops: &[&str]) -> Rules {
        let mut r = Rules::new(false);
        for op in ops {
            r.apply(op.as_bytes(), false).unwrap();
        }
        r
    }

    fn text(r: &Rules) -> String {
        String::from_utf8(r.describe()).unwrap()
    }

    #[test]
    fn descriptions_match_redis() {
        assert_eq!(text(&Rules::default_user()), "on nopass ~* &* +@all");
        assert_eq!(text(&Rules::new(false)), "off resetchannels -@all");
        assert_eq!(text(&Rules::new(true)), "off &* -@all");
        assert_eq!(
            text(&user(&[
                "on",
                ">p",
                "~a*",
                "%R~r*",
                "+get",
                "&ch",
                "(+hget ~h*)"
            ])),
            "on #148de9c5a7a44d19e56cd9ae1a554bf67847afb0c58f6e12fa29ac7ddfca9940 ~a* %R~r* \
             resetchannels &ch -@all +get (~h* resetchannels -@all +hget)"
        );
        assert_eq!(
            text(&user(&["+@all", "-get"])),
            "off resetchannels +@all -get"
        );
        assert_eq!(
            text(&user(&["%RW~k", "%W~w"])),
            "off ~k %W~w resetchannels -@all"
        );
        assert_eq!(
            text(&user(&["+select|0"])),
            "off resetchannels -@all +select|0"
        );
        assert_eq!(
            text(&user(&["+@all", "-@string", "reset"])),
            "off sanitize-payload resetchannels -@all"
        );
    }

    #[test]
    fn errors_match_redis() {
        let mut r = Rules::new(false);
        let e = |r: &mut Rules, op: &str| r.apply(op.as_bytes(), false).unwrap_err();
        assert_eq!(e(&mut r, "+nosuch"), RuleError::UnknownName);
        assert_eq!(e(&mut r, "+@nosuch"), RuleError::UnknownName);
        assert_eq!(e(&mut r, "-get|x"), RuleError::UnknownName);
        assert_eq!(e(&mut r, "+client|list|x"), RuleError::FirstArgOfSub);
        assert_eq!(e(&mut r, "+get|"), RuleError::Syntax);
        assert_eq!(e(&mut r, "bogus"), RuleError::Syntax);
        assert_eq!(e(&mut r, "%X~a"), RuleError::Syntax);
        assert_eq!(e(&mut r, "<nope"), RuleError::NoSuchPassword);
        assert_eq!(e(&mut r, "#abc"), RuleError::BadHash);
        r.apply(b"allkeys", false).unwrap();
        assert_eq!(e(&mut r, "~x"), RuleError::KeyAfterAll);
        r.apply(b"allchannels", false).unwrap();
        assert_eq!(e(&mut r, "&x"), RuleError::ChannelAfterAll);
    }

    #[test]
    fn passwords() {
        let r = user(&[">a", ">b", "<a"]);
        assert!(r.password_ok(b"b") && !r.password_ok(b"a"));
        assert!(user(&["nopass"]).password_ok(b"anything"));
        assert!(!Rules::new(false).password_ok(b""));
    }

    #[test]
    fn merging_selectors() {
        let m = merge_selectors(&[b"on", b"(~a", b"+get)", b"(+set)"]).unwrap();
        assert_eq!(
            m,
            vec![b"on".to_vec(), b"(~a +get)".to_vec(), b"(+set)".to_vec()]
        );
        assert_eq!(merge_selectors(&[b"on", b"(~a", b"+get"]), Err(1));
    }
}
