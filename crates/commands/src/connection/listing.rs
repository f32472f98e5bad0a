//! CLIENT LIST, INFO, ID, GETNAME and SETNAME called from a script (only
//! with DEBUG SET-DISABLE-DENY-SCRIPTS 1: they are `noscript`, as in
//! Redis, whose tests call CLIENT LIST from a script to see when another
//! client, served while the script is busy, renamed itself).
//!
//! **The script's own client.** Redis runs a script's calls on its Lua
//! client (id 1; the functions' engine has its own, id 2: both made at
//! start-up, so the first connection is id 3, here too). CLIENT ID, INFO,
//! GETNAME and SETNAME answer for that client, whose name outlives the
//! script as Redis's does; CLIENT INFO shows it as Redis 7.0.15 does
//! (`addr=?:0 laddr=?:0 fd=-1`, no events, its age the server's, the
//! script's database and protocol).
//!
//! **Every connection in CLIENT LIST.** A script may not wait for another
//! thread (one may be waiting for the script's shard), and a loop's
//! connections are visible only on the thread running it. So the list is
//! made of three sources, each connection taken from the first that has
//! it:
//! 1. live, the connections the run can read: the loop whose desk is lent
//!    to the script, and the script's sender where it is out of its slot
//!    (as SLOWLOG GET reads them, see `script::run::footprint`);
//! 2. the line each other loop published at its last cron ([`Listing`]),
//!    its name replaced by the client directory's (below): lag up to one
//!    cron tick (1/hz) for every other figure, as MEMORY STATS'
//!    `clients.normal`. Loops publish only while DEBUG
//!    SET-DISABLE-DENY-SCRIPTS is on (without it no script can call CLIENT
//!    LIST): otherwise their cron pays one relaxed load. Rejected:
//!    publishing always (a line formatted per connection per tick, for a
//!    debugging command), and publishing for a while after a script asked
//!    (a script's first call would see no loop's figures at all);
//! 3. the client directory (`ops::slowlog::Known`, kept at accept, close
//!    and every rename wherever it runs): which clients exist, their
//!    address, socket, age and *current* name, for a client no loop has
//!    published yet (the first call, a new connection), with Redis's
//!    figures of a fresh client for the rest.
//!
//! Membership and names are those of now (the directory: a HELLO SETNAME
//! served while the script runs shows at the script's next call); flags,
//! database, buffers, idle time and last command of clients of other loops
//! lag as said. The caller's line shows the command running the script
//! (`cmd=eval`), as Redis's does: read live, its own state says so (the
//! dispatch set it), else the script's command is written in. Inside
//! MULTI/EXEC Redis shows `exec`: so does a caller read live, while one
//! read from its loop's published line shows the script's command (a
//! known difference: nothing tells a run that it is inside EXEC rather
//! than on gathered copies). Not listed
//! from a script: a master link (no directory entry), the Lua clients
//! themselves (Redis lists neither of those either).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use resp::{Args, Reply};

use super::{check_name, info_line, list_filter, replica_line, type_of, write_list, ClientType};
use crate::coord::{ClientIo, ClientRegistry};
use crate::ctx::{ClientState, ServerShared};
use crate::error::CmdError;
use crate::ops::slowlog::Clients;

/// Redis's Lua clients: EVAL's and the functions' (see the module docs).
pub const LUA_CLIENT: u64 = 1;
pub const FUNCTION_CLIENT: u64 = 2;

/// One connection's CLIENT LIST line as its loop published it.
struct Row {
    id: u64,
    typ: ClientType,
    line: String,
}

/// The lines each loop publishes for scripts' CLIENT LIST, and the names
/// of the Lua clients (see the module documentation). Memory: one line
/// (about 400 bytes) per connection while scripts may list them, none
/// otherwise.
pub struct Listing {
    /// Per loop: whether it holds lines, and its lines.
    rows: Box<[(AtomicBool, Mutex<Vec<Row>>)]>,
    /// CLIENT SETNAME's names of [`LUA_CLIENT`] and [`FUNCTION_CLIENT`].
    lua_names: Mutex<[Option<Vec<u8>>; 2]>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Listing {
    pub fn new(loops: usize) -> Self {
        Listing {
            rows: (0..loops)
                .map(|_| (AtomicBool::new(false), Mutex::new(Vec::new())))
                .collect(),
            lua_names: Mutex::new([None, None]),
        }
    }

    /// Loop `id`'s cron: publishes `conns`' lines while scripts may list
    /// them (`wanted`: DEBUG SET-DISABLE-DENY-SCRIPTS is on), drops them
    /// once they no longer may. O(connections) while wanted; else one
    /// relaxed load.
    pub fn publish(&self, id: usize, now_ms: u64, wanted: bool, conns: &dyn ClientRegistry) {
        let Some((held, slot)) = self.rows.get(id) else {
            return;
        };
        if !wanted {
            // (Only this loop's cron writes its flag.)
            if held.load(Ordering::Relaxed) {
                held.store(false, Ordering::Relaxed);
                *lock(slot) = Vec::new();
            }
            return;
        }
        held.store(true, Ordering::Relaxed);
        let mut fresh = Vec::new();
        conns.for_each(&mut |st, io| {
            fresh.push(Row {
                id: st.id,
                typ: type_of(st),
                line: info_line(st, io, now_ms, 0),
            })
        });
        *lock(slot) = fresh;
    }

    /// The lines every loop published last, by client id, but those in
    /// `skip`.
    fn published(&self, skip: &HashSet<u64>) -> HashMap<u64, (ClientType, String)> {
        let mut all = HashMap::new();
        for (_, slot) in self.rows.iter() {
            for r in lock(slot).iter().filter(|r| !skip.contains(&r.id)) {
                all.insert(r.id, (r.typ, r.line.clone()));
            }
        }
        all
    }
}

/// `line` with field `key`'s value replaced by `value` (CLIENT LIST's
/// values hold no space: Redis refuses names with one).
fn set_field(line: &mut String, key: &str, value: &str) {
    let tag = format!(" {key}=");
    let Some(at) = line.find(&tag) else { return };
    let start = at + tag.len();
    let end = line[start..].find(' ').map_or(line.len(), |e| start + e);
    line.replace_range(start..end, value);
}

/// Redis's Lua client of a script's run (EVAL's or the functions'), as
/// its CLIENT calls see it (see the module documentation).
pub(crate) struct LuaClient<'a> {
    pub id: u64,
    /// The script's database and protocol (SELECT and `redis.setresp`
    /// inside it change them, as they change Redis's Lua client).
    pub db: usize,
    pub resp3: bool,
    pub server: &'a ServerShared,
}

/// The name of Lua client `id`.
pub(crate) fn lua_client_name(server: &ServerShared, id: u64) -> Option<Vec<u8>> {
    let names = lock(&server.client_mem.listing.lua_names);
    names.get(id.wrapping_sub(1) as usize).cloned().flatten()
}

/// Lua client `c`'s CLIENT INFO line, without its newline.
pub(crate) fn lua_client_line(c: &LuaClient<'_>) -> String {
    let now = engine::now_ms();
    let started_ms = now.saturating_sub(c.server.start.elapsed().as_millis() as u64);
    let st = ClientState {
        id: c.id,
        addr: "?:0".into(),
        laddr: "?:0".into(),
        fd: -1,
        name: lua_client_name(c.server, c.id),
        created_ms: started_ms,
        last_interaction_ms: started_ms,
        db: c.db,
        resp3: c.resp3,
        last_cmd: "client|info".into(),
        ..ClientState::default()
    };
    let mut line = info_line(&st, &ClientIo::default(), now, 0);
    // No socket: Redis shows no events.
    set_field(&mut line, "events", "");
    line
}

impl LuaClient<'_> {
    /// CLIENT ID, GETNAME, SETNAME, INFO or LIST from the script; `false`
    /// for another subcommand. `live` visits the connections the run can
    /// read; `caller` and `caller_cmd`: the client whose command runs the
    /// script, and that command's name.
    pub(crate) fn call(
        &self,
        full: &str,
        args: Args<'_>,
        live: &mut Clients<'_>,
        (caller, caller_cmd): (u64, &str),
        out: &mut Reply,
    ) -> Result<bool, CmdError> {
        match full {
            "client|id" => out.int(self.id as i64),
            "client|getname" => out.optional_bulk(lua_client_name(self.server, self.id).as_deref()),
            "client|setname" => {
                let name = args.get(2);
                check_name(name)?;
                let mut names = lock(&self.server.client_mem.listing.lua_names);
                if let Some(n) = names.get_mut(self.id.wrapping_sub(1) as usize) {
                    *n = (!name.is_empty()).then(|| name.to_vec());
                }
                out.ok();
            }
            "client|info" => {
                let mut line = lua_client_line(self);
                line.push('\n');
                out.verbatim("txt", line.as_bytes());
            }
            "client|list" => self.list(args, live, (caller, caller_cmd), out)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// CLIENT LIST from the script (see the module documentation).
    fn list(
        &self,
        args: Args<'_>,
        live: &mut Clients<'_>,
        (caller, caller_cmd): (u64, &str),
        out: &mut Reply,
    ) -> Result<(), CmdError> {
        let (typ, ids) = list_filter(args)?;
        let wanted = |t: ClientType| typ.is_none_or(|w| w == t);
        let now = engine::now_ms();
        let mut seen = HashSet::new();
        let mut lines = Vec::new();
        live(&mut |st, io| {
            if seen.insert(st.id) && wanted(type_of(st)) {
                lines.push((st.id, info_line(st, io, now, 0)));
            }
        });
        // Lines not read live: the caller's shows the script's command.
        let mut push = |id: u64, mut line: String| {
            if id == caller {
                set_field(&mut line, "cmd", caller_cmd);
            }
            lines.push((id, line));
        };
        for r in self.server.repl.lock().master.replicas.iter() {
            if seen.insert(r.id) && wanted(ClientType::Replica) {
                push(r.id, replica_line(r, now));
            }
        }
        let mut published = self.server.client_mem.listing.published(&seen);
        for (id, known) in self.server.ops.slowlog.known() {
            if seen.contains(&id) {
                continue;
            }
            let (t, mut line) = published.remove(&id).unwrap_or_else(|| {
                let st = ClientState {
                    id,
                    addr: known.label.0.clone(),
                    laddr: known.laddr.clone(),
                    fd: known.fd,
                    unix: known.unix,
                    created_ms: known.created_ms,
                    last_interaction_ms: known.created_ms,
                    ..ClientState::default()
                };
                (
                    ClientType::Normal,
                    info_line(&st, &ClientIo::default(), now, 0),
                )
            });
            if !wanted(t) {
                continue;
            }
            set_field(&mut line, "name", &String::from_utf8_lossy(&known.label.1));
            push(id, line);
        }
        write_list(lines, ids.as_deref(), out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_replaced_whole() {
        let mut l = "id=3 addr=1:2 name=old age=0 cmd=get user=default".to_string();
        set_field(&mut l, "name", "new");
        set_field(&mut l, "cmd", "eval");
        set_field(&mut l, "user", "");
        assert_eq!(l, "id=3 addr=1:2 name=new age=0 cmd=eval user=");
        set_field(&mut l, "name", "");
        assert_eq!(l, "id=3 addr=1:2 name= age=0 cmd=eval user=");
        set_field(&mut l, "nope", "x");
        assert_eq!(l, "id=3 addr=1:2 name= age=0 cmd=eval user=");
    }
}
