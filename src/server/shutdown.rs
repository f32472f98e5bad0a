//! Shutdown, as Redis's prepareForShutdown / finishShutdown: every worker
//! stops between loop iterations and hands its shard to the main thread
//! (the [`Gate`]), which abandons a background save or rewrite, writes the
//! final snapshot and decides. If the final save fails (without FORCE),
//! or the AOF's first rewrite is still being written, the server does not
//! exit: the shards go back to their workers, which carry on serving, and
//! the clients that sent SHUTDOWN get "-ERR Errors trying to SHUTDOWN.
//! Check logs.". A SIGTERM that fails the same way is logged and the
//! server keeps running.
//!
//! No command runs on any shard while the shards are at the gate, so what
//! the final save writes is everything acknowledged before the shutdown
//! began (the workers hand their AOF records to the writer before
//! parking).

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};

use commands::ctx::{SHUTDOWN_FORCE, SHUTDOWN_NOSAVE, SHUTDOWN_SAVE};
use commands::persist::Child;
use commands::ServerShared;

use crate::log;

/// What the main thread decided for the workers at the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Close every connection and end.
    Exit,
    /// The shutdown was refused: take the shard back and carry on.
    Resume,
}

#[derive(Default)]
struct State {
    /// Each worker's shard while it waits at the gate.
    shards: Vec<Option<engine::Shard>>,
    arrived: usize,
    /// Workers that never started (they will never arrive).
    absent: usize,
    /// Bumped by each decision; a worker waits for it to move past the
    /// round it arrived in.
    round: u64,
    verdict: Option<Verdict>,
    /// Workers that closed their listeners after the verdict to exit.
    unlistened: usize,
}

/// Where workers wait while the main thread decides on a shutdown.
pub struct Gate {
    n: usize,
    state: Mutex<State>,
    cv: Condvar,
}

impl Gate {
    pub fn new(n: usize) -> Gate {
        Gate {
            n,
            state: Mutex::new(State {
                shards: (0..n).map(|_| None).collect(),
                ..State::default()
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A worker failed to start: it will never arrive.
    pub fn absent(&self) {
        self.lock().absent += 1;
        self.cv.notify_all();
    }

    /// Worker `id` hands its shard over and waits for the verdict; it gets
    /// the shard back either way (on exit, to close its connections with
    /// it).
    pub fn park(&self, id: usize, shard: engine::Shard) -> (Verdict, Option<engine::Shard>) {
        let mut st = self.lock();
        st.shards[id] = Some(shard);
        st.arrived += 1;
        let round = st.round;
        self.cv.notify_all();
        while st.round == round {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let v = st.verdict.unwrap_or(Verdict::Exit);
        (v, st.shards[id].take())
    }

    /// After the verdict to exit: this worker closed its listeners; waits
    /// (at most a second, in case a worker is stuck) until every worker
    /// has, so that no connection closes while another thread still
    /// accepts new ones.
    pub fn listeners_closed(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut st = self.lock();
        st.unlistened += 1;
        self.cv.notify_all();
        while st.unlistened + st.absent < self.n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .cv
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Runs `f` on worker `id`'s shard if it waits at the gate (false if
    /// not): a script holding every shard (`worker::reach`) that cannot
    /// arrive before it ends still reaches the shards parked meanwhile.
    /// Safe while the caller's own worker has not arrived: the main thread
    /// takes the shards only once every worker is here.
    pub fn with_parked(&self, id: usize, f: impl FnOnce(&mut engine::Shard)) -> bool {
        let mut st = self.lock();
        match st.shards.get_mut(id).and_then(Option::as_mut) {
            Some(shard) => {
                f(shard);
                true
            }
            None => false,
        }
    }

    /// The main thread: waits for a shutdown request to gather every
    /// worker, decides, and repeats until the verdict is to exit. Returns
    /// once every worker was told to exit.
    pub fn run(&self, server: &ServerShared, rewriter: &super::aof_rewrite::Rewriter) {
        loop {
            let mut st = self.lock();
            while st.arrived + st.absent < self.n {
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            let ids: Vec<usize> = (0..self.n).filter(|&i| st.shards[i].is_some()).collect();
            let mut shards: Vec<engine::Shard> =
                st.shards.iter_mut().filter_map(Option::take).collect();
            let complete = st.absent == 0;
            drop(st);
            let exit = !complete || finish(server, rewriter, &mut shards);
            let mut st = self.lock();
            // Back to the workers they came from.
            for (i, s) in ids.into_iter().zip(shards) {
                st.shards[i] = Some(s);
            }
            if exit {
                st.verdict = Some(Verdict::Exit);
            } else {
                st.verdict = Some(Verdict::Resume);
                server.shutdown.store(false, Ordering::SeqCst);
            }
            st.arrived = 0;
            st.round += 1;
            drop(st);
            self.cv.notify_all();
            if exit {
                return;
            }
        }
    }
}

/// Redis's finishShutdown with every shard in hand: true to exit.
fn finish(
    server: &ServerShared,
    rewriter: &super::aof_rewrite::Rewriter,
    shards: &mut [engine::Shard],
) -> bool {
    use commands::persist::AofControl;
    let cfg = server.config();
    let mode = server.shutdown_mode.load(Ordering::SeqCst);
    let force = mode & SHUTDOWN_FORCE != 0;
    let how = mode & !SHUTDOWN_FORCE;
    log::warning(format_args!("User requested shutdown..."));
    let p = &server.persist;
    match p.child() {
        Child::None => {}
        Child::Bgsave => {
            log::warning(format_args!("There is a child saving an .rdb. Killing it!"));
            if !p.kill_child() {
                log::warning(format_args!("The background save did not stop in time."));
            }
        }
        Child::Rewrite => {
            // The AOF being turned on has no base yet: its records alone
            // do not hold the data.
            if rewriter.waiting_rewrite() {
                if force {
                    log::warning(format_args!("Writing initial AOF. Exit anyway."));
                } else {
                    log::warning(format_args!("Writing initial AOF, can't exit."));
                    return refused();
                }
            }
            log::warning(format_args!(
                "There is a child rewriting the AOF. Killing it!"
            ));
            if !p.kill_child() {
                log::warning(format_args!("The AOF rewrite did not stop in time."));
            }
        }
    }
    let wanted = match how {
        SHUTDOWN_NOSAVE => false,
        SHUTDOWN_SAVE => true,
        _ => !cfg.save_rules().is_empty(),
    };
    if wanted {
        log::notice(format_args!(
            "Saving the final RDB snapshot before exiting."
        ));
        match commands::persist::save_now(
            &cfg.rdb_path(),
            shards,
            (cfg.rdbcompression, cfg.rdbchecksum),
            &server.ops.functions,
        ) {
            Ok(_) => log::notice(format_args!("DB saved on disk")),
            Err(_) if force => {
                log::warning(format_args!("Error trying to save the DB. Exit anyway."));
            }
            Err(_) => {
                log::warning(format_args!("Error trying to save the DB, can't exit."));
                return refused();
            }
        }
    }
    // Exiting: the AOF's last records are written and fsynced (Redis
    // flushes and fsyncs it at exit; a failure there is only logged).
    if let Some(a) = rewriter.current() {
        if rewriter.enabled() {
            log::notice(format_args!("Calling fsync() on the AOF file."));
        }
        a.stop();
        // The stream's last records reach the replicas' sockets.
        super::repl::master::drain(server, std::time::Duration::from_secs(10));
        if !a.last_write_ok() {
            log::warning(format_args!(
                "Fail to write or fsync the AOF file at exit: see the errors above."
            ));
        }
    }
    true
}

fn refused() -> bool {
    log::warning(format_args!(
        "Errors trying to shut down the server. Check the logs for more information."
    ));
    false
}
