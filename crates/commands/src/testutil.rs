//! In-process test driver (tier 2 tests): runs commands through the real
//! dispatch against `n` shards held in one thread, executing coordinator
//! jobs synchronously on the right shard. No sockets, no threads.

use engine::Shard;
use resp::{OwnedArgs, Reply};

use crate::coord::{ClientIo, ClientRegistry, Plan, ShardEnv};
use crate::ctx::{ClientState, ConnCtx, ServerShared, ThreadStats};
use crate::exec::{dispatch, run_shard, ShardCall, Step};

/// A registry with no clients, for jobs run outside the event loop.
pub struct NoClients;
impl ClientRegistry for NoClients {
    fn for_each(&self, _f: &mut dyn FnMut(&ClientState, &ClientIo)) {}
    fn kill(&mut self, _id: u64) -> bool {
        false
    }
}

/// `n` shards and one client, in process.
pub struct TestServer {
    pub shards: Vec<Shard>,
    pub client: ClientState,
    pub server: std::sync::Arc<ServerShared>,
    pub stats: ThreadStats,
    /// Records coordinators made on the home thread
    /// (`Coordinator::take_records`), in step order.
    pub home_records: Vec<engine::outbox::Chunk>,
    /// Hops coordinators cost so far (the home is shard 0): `rounds`
    /// counts steps that sent work to another shard (each a round trip
    /// the command waits for), `messages` the works sent there.
    pub rounds: usize,
    pub messages: usize,
    /// Of `rounds`, those that asked another shard for a lock.
    pub lock_rounds: usize,
    /// Transactions run without locks wherever they can (as the runtime
    /// runs them when it holds every shard they touch, nothing else
    /// running there: `Coordinator::run_unlocked`).
    pub unlocked: bool,
}

impl TestServer {
    pub fn new(nshards: usize) -> Self {
        Self::with_config(config::Config::default(), nshards)
    }

    /// [`TestServer::new`] with `cfg` (the AOF loader replays its file
    /// with the server's configuration).
    pub fn with_config(cfg: config::Config, nshards: usize) -> Self {
        let dbs = cfg.databases;
        TestServer {
            shards: (0..nshards).map(|i| Shard::new(i, dbs)).collect(),
            client: ClientState {
                id: 1,
                authenticated: true,
                ..Default::default()
            },
            server: ServerShared::new(cfg, nshards).share(),
            stats: ThreadStats::default(),
            home_records: Vec::new(),
            rounds: 0,
            messages: 0,
            lock_rounds: 0,
            unlocked: false,
        }
    }

    /// Turns every shard's records on or off (as the runtime does for the
    /// append-only file).
    pub fn recording(&mut self, on: bool) {
        for s in &mut self.shards {
            s.outbox.records_on = on;
        }
    }

    /// The records made since the last call, as commands (each a list of
    /// arguments): each shard's in order, shard by shard, then the
    /// coordinators'. A `SELECT` between records is kept.
    pub fn take_records(&mut self) -> Vec<Vec<String>> {
        let mut chunks: Vec<engine::outbox::Chunk> = self
            .shards
            .iter_mut()
            .filter_map(|s| s.outbox.take())
            .collect();
        chunks.append(&mut self.home_records);
        let mut out = Vec::new();
        for c in chunks {
            let mut buf = c.bytes.as_slice();
            while !buf.is_empty() {
                let (args, used) = parse_array(buf);
                out.push(args);
                buf = &buf[used..];
            }
        }
        out
    }

    /// Runs one command and returns its raw reply bytes.
    pub fn raw(&mut self, argv: &[&[u8]]) -> Vec<u8> {
        // As the event loop's `refresh_config`: the shards follow the
        // policy (tests may also write `server.config` directly).
        let lfu = crate::keys::lfu_params(&self.server);
        let enc = crate::ctx::enc_limits(&self.server);
        for sh in &mut self.shards {
            sh.lfu = lfu;
            sh.enc = enc;
            crate::memory::configure_shard(sh, &self.server);
        }
        let owned = OwnedArgs::from_slices(argv);
        let args = owned.args();
        let mut out = Reply::new(self.client.resp3);
        let mut scratch = crate::exec::KeyScratch::default();
        let step = {
            let mut ctx = ConnCtx {
                client: &mut self.client,
                out: &mut out,
                server: &self.server,
                home: 0,
                key_shards: &[],
            };
            dispatch(args, &mut ctx, &mut self.stats, &mut scratch)
        };
        match step {
            Step::Done | Step::Blocked | Step::Paused => {}
            Step::Shard {
                shard,
                resolved,
                handler,
            } => {
                let call = ShardCall {
                    db: self.client.db,
                    no_touch: self.client.no_touch,
                    databases: self.shards[0].dbs.len(),
                    max_bulk_len: self.server.config().proto_max_bulk_len,
                    reply_cap_bytes: 0,
                    // In process there is nobody to wake a blocked client.
                    may_block: false,
                    in_tx: false,
                    nshards: self.shards.len(),
                    caller: if resolved.spec.has(crate::table::flags::SCRIPT) {
                        crate::acl::caller(&self.server, &mut self.client)
                    } else {
                        None
                    },
                    tracker: crate::tracking::script_tracker(&self.client, resolved),
                    evicting_for: crate::tracking::evicting_for(&self.client),
                    client: self.client.id,
                    ops: self.server.ops,
                    // The AOF loader replays as Redis's AOF client: as a
                    // master's link (no ACL, no OOM refusal, keys past
                    // their deadline seen).
                    master: self.client.master,
                };
                let sh = &mut self.shards[shard];
                sh.tick();
                let on = run_shard(resolved, handler, args, sh, call, &mut out, &mut self.stats);
                if let Some(on) = on.filter(|on| on.widen) {
                    // A script that strayed: run again under wider locks,
                    // as the runtime does.
                    let c = {
                        let mut ctx = ConnCtx {
                            client: &mut self.client,
                            out: &mut out,
                            server: &self.server,
                            home: 0,
                            key_shards: &[],
                        };
                        crate::script::wide::coordinator(
                            resolved.spec,
                            handler,
                            &mut ctx,
                            args,
                            on.keys,
                        )
                    };
                    self.drive(c, &mut out);
                }
            }
            Step::Coord { mut coord, .. } => {
                let mut shards = Vec::new();
                if self.unlocked && coord.lock_shards(&mut shards) {
                    coord.run_unlocked();
                }
                self.drive(coord, &mut out)
            }
            // In process, on copies (as the runtime when its shards are
            // not co-hosted).
            Step::Script { resolved, handler } => {
                let c = {
                    let mut ctx = ConnCtx {
                        client: &mut self.client,
                        out: &mut out,
                        server: &self.server,
                        home: 0,
                        key_shards: &[],
                    };
                    crate::script::wide::coordinator(
                        resolved.spec,
                        handler,
                        &mut ctx,
                        args,
                        Vec::new(),
                    )
                };
                self.drive(c, &mut out);
            }
        }
        out.into_bytes()
    }

    /// Drives a coordinator to its end, running each job on its shard.
    pub fn drive(&mut self, mut c: Box<dyn crate::coord::Coordinator>, out: &mut Reply) {
        let mut results = Vec::new();
        loop {
            let mut plan = Plan::default();
            let res = c.step(results, &mut plan, out, &mut self.client);
            self.home_records.extend(c.take_records());
            if let Err(e) = res {
                out.error(&e.to_string());
                break;
            }
            if plan.is_empty() {
                break;
            }
            results = Vec::new();
            let remote = plan.jobs.iter().filter(|(s, _)| *s != 0).count();
            self.messages += remote;
            self.rounds += usize::from(remote > 0);
            let locking = plan.jobs.iter().any(|(s, w)| *s != 0 && w.lock.is_some());
            self.lock_rounds += usize::from(locking);
            // One thread, one command at a time: every lock is
            // granted at once, so locks and releases are no-ops.
            for (s, work) in plan.jobs {
                let job = work.job;
                let sh = &mut self.shards[s];
                sh.tick();
                let mut env = ShardEnv {
                    shard: sh,
                    stats: &mut self.stats,
                    clients: &mut NoClients,
                };
                results.push(job.call(&mut env));
            }
        }
    }

    /// Runs one command given as strings; the reply as a lossy string.
    pub fn run(&mut self, argv: &[&str]) -> String {
        let v: Vec<&[u8]> = argv.iter().map(|s| s.as_bytes()).collect();
        String::from_utf8_lossy(&self.raw(&v)).into_owned()
    }
}

/// One RESP array of bulk strings at the start of `b` (as records are
/// written): its arguments (lossy UTF-8) and its length in bytes.
fn parse_array(b: &[u8]) -> (Vec<String>, usize) {
    fn line(b: &[u8], at: usize) -> (usize, usize) {
        // INVARIANT (test input): records are well-formed RESP.
        let end = at + b[at..].windows(2).position(|w| w == b"\r\n").expect("CRLF");
        let n = std::str::from_utf8(&b[at + 1..end])
            .unwrap()
            .parse()
            .unwrap();
        (n, end + 2)
    }
    let (argc, mut at) = line(b, 0);
    let mut args = Vec::with_capacity(argc);
    for _ in 0..argc {
        let (len, start) = line(b, at);
        args.push(String::from_utf8_lossy(&b[start..start + len]).into_owned());
        at = start + len + 2;
    }
    (args, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_shard_commands_agree_with_one_shard() {
        for n in [1, 2, 4] {
            let mut t = TestServer::new(n);
            assert_eq!(
                t.run(&["MSET", "a", "1", "b", "2", "c", "3", "{a}x", "4"]),
                "+OK\r\n"
            );
            assert_eq!(
                t.run(&["MGET", "a", "nope", "c", "b", "{a}x"]),
                "*5\r\n$1\r\n1\r\n$-1\r\n$1\r\n3\r\n$1\r\n2\r\n$1\r\n4\r\n"
            );
            assert_eq!(t.run(&["EXISTS", "a", "b", "a", "zz"]), ":3\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":4\r\n");
            assert_eq!(t.run(&["DEL", "a", "b", "zz"]), ":2\r\n");
            assert_eq!(t.run(&["DBSIZE"]), ":2\r\n");
        }
    }

    #[test]
    fn dispatch_errors() {
        let mut t = TestServer::new(2);
        assert_eq!(
            t.run(&["NOPE", "x"]),
            "-ERR unknown command 'NOPE', with args beginning with: 'x' \r\n"
        );
        assert_eq!(
            t.run(&["GET"]),
            "-ERR wrong number of arguments for 'get' command\r\n"
        );
        assert_eq!(
            t.run(&["MSET", "a", "1", "b"]),
            "-ERR wrong number of arguments for 'mset' command\r\n"
        );
        // Redis's authRequired: only while the default user needs a password.
        t.client.authenticated = false;
        assert_eq!(t.run(&["GET", "a"]), "$-1\r\n");
        t.server.acl.set_requirepass(Some(b"pw"));
        assert_eq!(t.run(&["GET", "a"]), "-NOAUTH Authentication required.\r\n");
    }
}
