//! SHUTDOWN and SIGTERM when the final save fails: Redis 7 refuses to
//! exit ("-ERR Errors trying to SHUTDOWN. Check logs.", the server keeps
//! serving, nothing is lost) unless NOSAVE or FORCE; with the AOF on, the
//! last records reach the file before exiting. Every test runs against
//! redis-server too (`TESSERA_TEST_BIN=/usr/bin/redis-server`).

mod common;

use std::time::{Duration, Instant};

use common::{wait_for, DataDir, Server};
use redis::Commands;

const REFUSED: &[u8] = b"-ERR Errors trying to SHUTDOWN. Check logs.\r\n";

fn tessera(dir: &DataDir, extra: &[&str]) -> Server {
    let mut args = vec!["--dir", dir.path()];
    args.extend_from_slice(extra);
    Server::tessera(&args)
}

/// Makes every save fail: `dump.rdb` becomes a directory, so renaming the
/// written temp file over it fails (for Redis too, whose working directory
/// is the data directory: removing that would not come back).
fn break_saves(dir: &DataDir) {
    std::fs::create_dir(dir.0.join("dump.rdb")).unwrap();
    std::fs::write(dir.0.join("dump.rdb").join("x"), b"x").unwrap();
}

fn fix_saves(dir: &DataDir) {
    std::fs::remove_dir_all(dir.0.join("dump.rdb")).unwrap();
}

fn wait_exit(s: &mut Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.is_running() {
        assert!(Instant::now() < deadline, "server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn send(r: &mut common::RawConn, cmd: &[&str]) {
    let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
    r.send(&common::encode_command(&args));
}

/// Sends SHUTDOWN with `how` and returns the reply, or `None` if the
/// connection closed without one (the server exits).
fn shutdown(s: &Server, how: &[&str]) -> Option<Vec<u8>> {
    let mut r = s.raw();
    let mut cmd = vec!["SHUTDOWN"];
    cmd.extend_from_slice(how);
    let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
    r.send(&common::encode_command(&args));
    r.try_read_reply().ok()
}

fn refusals(s: &Server) -> usize {
    s.log()
        .matches("Errors trying to shut down the server")
        .count()
}

fn pid(c: &mut redis::Connection) -> String {
    common::info_field(c, "server", "process_id")
}

#[test]
fn a_failed_final_save_refuses_to_exit() {
    let dir = DataDir::new("shutdown-refused");
    let mut s = tessera(&dir, &["--save", "3600 1"]);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    // The final save cannot be put in place.
    break_saves(&dir);

    // The reply comes in order, and the connection carries on.
    let mut r = s.raw();
    send(&mut r, &["SHUTDOWN"]);
    send(&mut r, &["GET", "a"]);
    assert_eq!(r.read_reply(), REFUSED);
    assert_eq!(r.read_reply(), b"$1\r\n1\r\n");
    for how in [&["SAVE"][..], &["NOW"], &["SAVE", "NOW"], &["now"]] {
        assert_eq!(shutdown(&s, how).as_deref(), Some(REFUSED), "{how:?}");
    }
    assert_eq!(
        r.cmd_str(&["SHUTDOWN", "ABORT"]),
        b"-ERR No shutdown in progress.\r\n"
    );
    assert!(s.is_running());
    assert_eq!(refusals(&s), 5, "{}", s.log());
    assert!(s.log().contains("Error trying to save the DB, can't exit."));
    // Writes go on; the save status is untouched (the shutdown save is a
    // synchronous save, not a BGSAVE).
    let _: () = c.set("b", 2).unwrap();
    assert_eq!(
        common::info_field(&mut c, "persistence", "rdb_last_bgsave_status"),
        "ok"
    );

    // SIGTERM: logged, the server keeps running.
    let before = refusals(&s);
    let st = std::process::Command::new("kill")
        .args(["-TERM", &pid(&mut c)])
        .status()
        .unwrap();
    assert!(st.success());
    wait_for("the refused SIGTERM", || refusals(&s) > before);
    assert!(s.is_running());
    assert!(s.log().contains("Received SIGTERM scheduling shutdown..."));
    let v: Vec<Option<u64>> = c.mget(&["a", "b"]).unwrap();
    assert_eq!(v, [Some(1), Some(2)]);

    // Saves work again: the next SHUTDOWN saves and exits, and nothing
    // was lost.
    fix_saves(&dir);
    let _: () = c.set("c", 3).unwrap();
    drop(c);
    assert_eq!(shutdown(&s, &[]), None);
    wait_exit(&mut s);
    let s = tessera(&dir, &["--save", ""]);
    let v: Vec<Option<u64>> = s.conn().mget(&["a", "b", "c"]).unwrap();
    assert_eq!(v, [Some(1), Some(2), Some(3)]);
}

#[test]
fn sigterm_with_a_failing_save_then_a_working_one() {
    let dir = DataDir::new("shutdown-sigterm");
    let mut s = tessera(&dir, &["--save", "3600 1"]);
    let mut c = s.conn();
    let _: () = c.set("k", "v").unwrap();
    let p = pid(&mut c);
    break_saves(&dir);
    let kill = || {
        std::process::Command::new("kill")
            .args(["-TERM", &p])
            .status()
            .unwrap()
    };
    assert!(kill().success());
    wait_for("the refused SIGTERM", || refusals(&s) == 1);
    let got: String = c.get("k").unwrap();
    assert_eq!(got, "v");
    // A second SIGTERM is handled too: with saves working, it exits.
    fix_saves(&dir);
    assert!(kill().success());
    wait_exit(&mut s);
    let s = tessera(&dir, &["--save", ""]);
    let got: String = s.conn().get("k").unwrap();
    assert_eq!(got, "v");
}

#[test]
fn nosave_and_force_exit_anyway() {
    for how in [
        &["NOSAVE"][..],
        &["FORCE"],
        &["SAVE", "FORCE"],
        &["NOW", "FORCE"],
        &["nosave", "now"],
    ] {
        let dir = DataDir::new("shutdown-force");
        let mut s = tessera(&dir, &["--save", "3600 1"]);
        let _: () = s.conn().set("a", 1).unwrap();
        break_saves(&dir);
        assert_eq!(shutdown(&s, how), None, "{how:?}");
        wait_exit(&mut s);
        if how.contains(&"FORCE") && !how.contains(&"NOSAVE") {
            assert!(
                s.log()
                    .contains("Error trying to save the DB. Exit anyway."),
                "{how:?}: {}",
                s.log()
            );
        }
    }
}

#[test]
fn without_save_rules_nothing_is_saved_and_it_exits() {
    let dir = DataDir::new("shutdown-nosave-rules");
    let mut s = tessera(&dir, &["--save", ""]);
    let _: () = s.conn().set("a", 1).unwrap();
    break_saves(&dir);
    assert_eq!(shutdown(&s, &[]), None);
    wait_exit(&mut s);
}

#[test]
fn shutdown_writes_the_aof_out() {
    // appendfsync no: the records may sit in the writer's queue; the
    // shutdown writes and syncs them before exiting.
    let dir = DataDir::new("shutdown-aof");
    let aof = ["--save", "", "--appendonly", "yes", "--appendfsync", "no"];
    let mut s = tessera(&dir, &aof);
    let mut c = s.conn();
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.set(format!("k{i}"), i).ignore();
    }
    let _: () = pipe.query(&mut c).unwrap();
    drop(c);
    assert_eq!(shutdown(&s, &[]), None);
    wait_exit(&mut s);
    let s = tessera(&dir, &aof);
    let mut c = s.conn();
    let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 2000);
    let v: u64 = c.get("k1999").unwrap();
    assert_eq!(v, 1999);
}

#[test]
fn a_bgsave_running_at_a_refused_shutdown_is_abandoned_without_error() {
    let dir = DataDir::new("shutdown-bgsave");
    let s = tessera(&dir, &["--save", "3600 1"]);
    let mut c = s.conn();
    let _: () = c.set("a", 1).unwrap();
    break_saves(&dir);
    // The BGSAVE may finish (and fail) before the SHUTDOWN, or be killed
    // by it; either way the shutdown is refused and the server serves on.
    let mut r = s.raw();
    send(&mut r, &["BGSAVE"]);
    send(&mut r, &["SHUTDOWN"]);
    assert_eq!(r.read_reply(), b"+Background saving started\r\n");
    assert_eq!(r.read_reply(), REFUSED);
    wait_for("no save running", || {
        common::info_field(&mut c, "persistence", "rdb_bgsave_in_progress") == "0"
    });
    // A new BGSAVE can start (the killed one left no state behind).
    fix_saves(&dir);
    let reply: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(reply, "Background saving started");
    wait_for("the save", || dir.0.join("dump.rdb").is_file());
}

/// Tessera only (Redis's rewrite child names its temp file after its own
/// pid): the rewrite that turns the AOF on is held at its temp file (a
/// FIFO nobody reads), so the shutdown finds it running.
#[test]
fn a_shutdown_while_the_aof_is_being_turned_on_is_refused() {
    if common::testing_real_redis() {
        return;
    }
    for force in [false, true] {
        let dir = DataDir::new("shutdown-wait-rewrite");
        let mut s = tessera(&dir, &["--save", ""]);
        let mut c = s.conn();
        let _: () = c.set("a", 1).unwrap();
        let aofdir = dir.0.join("appendonlydir");
        std::fs::create_dir_all(&aofdir).unwrap();
        let fifo = aofdir.join(format!("temp-rewriteaof-bg-{}.aof", pid(&mut c)));
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("yes")
            .query(&mut c)
            .unwrap();
        if !force {
            // At once, before the cron starts the rewrite (most runs): the
            // rewrite Redis forks in CONFIG SET counts as running.
            assert_eq!(shutdown(&s, &[]).as_deref(), Some(REFUSED), "at once");
        }
        // Started, its writer at the FIFO (INFO shows it in progress from
        // CONFIG SET on, before the cron starts it, as Redis forks it in
        // the command: too early for the FIFO below to get a writer).
        wait_for("the rewrite", || {
            s.log()
                .contains("Background append only file rewriting started")
        });
        let drain = move || {
            std::thread::spawn(move || {
                let mut f = std::fs::File::open(&fifo).unwrap();
                let mut sink = Vec::new();
                let _ = std::io::Read::read_to_end(&mut f, &mut sink);
            })
        };
        if force {
            // The writer is unblocked once the shutdown waits for it.
            let mut r = s.raw();
            send(&mut r, &["SHUTDOWN", "FORCE"]);
            wait_for("the shutdown", || {
                s.log().contains("Writing initial AOF. Exit anyway.")
            });
            let t = drain();
            assert!(r.try_read_reply().is_err());
            wait_exit(&mut s);
            t.join().unwrap();
            continue;
        }
        for how in [&[][..], &["NOSAVE"], &["SAVE"]] {
            assert_eq!(shutdown(&s, how).as_deref(), Some(REFUSED), "{how:?}");
        }
        assert!(s.log().contains("Writing initial AOF, can't exit."));
        // The rewrite goes on (it fails: a FIFO cannot be fsynced, and
        // is removed with it) and the next one completes the AOF.
        let t = drain();
        wait_for("a rewrite to complete the AOF", || {
            // One INFO: the status is "ok" before the first rewrite ends.
            let text: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
            text.contains("aof_last_bgrewrite_status:ok")
                && text.contains("aof_rewrite_in_progress:0")
        });
        t.join().unwrap();
        let _: () = c.set("b", 2).unwrap();
        drop(c);
        assert_eq!(shutdown(&s, &[]), None);
        wait_exit(&mut s);
        let s = tessera(&dir, &["--save", "", "--appendonly", "yes"]);
        let v: Vec<Option<u64>> = s.conn().mget(&["a", "b"]).unwrap();
        assert_eq!(v, [Some(1), Some(2)]);
    }
}

/// `shutdown-on-sigterm` / `shutdown-on-sigint` give a signal SHUTDOWN's
/// flags (Redis 7.0): `nosave` exits without saving even with save rules,
/// `force` exits though the final save fails, `save` saves without save
/// rules; CONFIG SET changes it at run time.
#[test]
fn shutdown_on_signal_flags_choose_the_shutdown() {
    let kill = |sig: &str, p: &str| {
        assert!(std::process::Command::new("kill")
            .args([sig, p])
            .status()
            .unwrap()
            .success());
    };
    // nosave: a failing save is not even tried.
    let dir = DataDir::new("shutdown-sig-nosave");
    let mut s = tessera(
        &dir,
        &["--save", "3600 1", "--shutdown-on-sigterm", "nosave"],
    );
    let mut c = s.conn();
    let _: () = c.set("k", "v").unwrap();
    break_saves(&dir);
    kill("-TERM", &pid(&mut c));
    wait_exit(&mut s);
    // force, set at run time, for SIGINT.
    let dir = DataDir::new("shutdown-sig-force");
    let mut s = tessera(&dir, &["--save", "3600 1"]);
    let mut c = s.conn();
    let _: () = c.set("k", "v").unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "shutdown-on-sigint", "force"])
        .query(&mut c)
        .unwrap();
    break_saves(&dir);
    kill("-INT", &pid(&mut c));
    wait_exit(&mut s);
    assert!(
        s.log()
            .contains("Error trying to save the DB. Exit anyway."),
        "{}",
        s.log()
    );
    // save: a snapshot without save rules.
    let dir = DataDir::new("shutdown-sig-save");
    let mut s = tessera(&dir, &["--save", "", "--shutdown-on-sigterm", "save"]);
    let mut c = s.conn();
    let _: () = c.set("k", "v").unwrap();
    kill("-TERM", &pid(&mut c));
    wait_exit(&mut s);
    let s = tessera(&dir, &["--save", ""]);
    let got: String = s.conn().get("k").unwrap();
    assert_eq!(got, "v");
}

/// When a client sees its connection closed by SHUTDOWN, the server no
/// longer accepts connections (Redis exits in one go; Redis's Tcl
/// unit/scripting "SHUTDOWN NOSAVE can kill a timedout script anyway"
/// reconnects at once and expects "connection refused"). With a client on
/// every thread's listener, each closed only after every listener is.
#[test]
fn once_shutdown_closes_a_connection_no_new_one_is_accepted() {
    for round in 0..5 {
        let dir = DataDir::new("shutdown-refuses");
        let threads = ["--shards", "4", "--shard-consolidation", "no"];
        let mut args = vec!["--save", ""];
        if !common::testing_real_redis() {
            args.extend_from_slice(&threads);
        }
        let s = tessera(&dir, &args);
        let port = s.port();
        // Clients spread over the threads (one listener each).
        let mut idle: Vec<_> = (0..16).map(|_| s.raw()).collect();
        for r in &mut idle {
            send(r, &["PING"]);
            assert_eq!(r.read_reply(), b"+PONG\r\n");
        }
        let mut r = s.raw();
        send(&mut r, &["SHUTDOWN", "NOSAVE"]);
        assert!(r.try_read_reply().is_err(), "a reply to SHUTDOWN NOSAVE");
        let again = std::net::TcpStream::connect(("127.0.0.1", port));
        assert!(
            again.is_err(),
            "round {round}: a connection was accepted after SHUTDOWN closed one"
        );
        // Every other client's connection closes too.
        for c in &mut idle {
            assert!(c.try_read_reply().is_err());
        }
    }
}
