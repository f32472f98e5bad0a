//! Setup shared by the tests of scripts across shards under concurrent
//! clients (`tests/scripting_wide.rs`, `tests/scripting_lend.rs`): client
//! connections whose every reply has a deadline, counters set to a start
//! value, a thread that reads their sum in one script until told to stop
//! (it must never see a move half done), and the final sum. Each file
//! keeps its scripts and scenarios.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one reply may take: a script may wait behind the locks of
/// every other client's scripts on a loaded machine.
pub const WAIT: Duration = Duration::from_secs(30);

/// How many sums the reader reads at most (it stops earlier when told).
const CHECKS_MAX: usize = 100_000;

/// The sum of the counters named in KEYS, read in one script.
pub const SUM_OF_KEYS: &str = r#"
local n = 0
for i = 1, #KEYS do n = n + tonumber(redis.call('GET', KEYS[i])) end
return n
"#;

/// The sum of the counters named in ARGV (keys it does not declare),
/// read in one script.
pub const SUM_OF_ARGV: &str = r#"
local n = 0
for i = 1, #ARGV do n = n + tonumber(redis.call('GET', ARGV[i])) end
return n
"#;

/// A connection to `addr` whose every reply has a deadline ([`WAIT`]).
pub fn connect(addr: &str) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{addr}")).unwrap();
    let con = client.get_connection_with_timeout(WAIT).unwrap();
    con.set_read_timeout(Some(WAIT)).unwrap();
    con.set_write_timeout(Some(WAIT)).unwrap();
    con
}

/// Sets every key of `keys` to `start`.
pub fn set_all(con: &mut redis::Connection, keys: &[String], start: i64) {
    for k in keys {
        let _: () = redis::cmd("SET").arg(k).arg(start).query(con).unwrap();
    }
}

/// The counters' values, once every client is done: their sum must be
/// `want`.
pub fn assert_sum(con: &mut redis::Connection, keys: &[String], want: i64) -> Vec<i64> {
    let values: Vec<i64> = redis::cmd("MGET").arg(keys).query(con).unwrap();
    assert_eq!(values.iter().sum::<i64>(), want, "{values:?}");
    values
}

/// A thread reading the counters' sum in one script ([`SUM_OF_KEYS`] or
/// [`SUM_OF_ARGV`]) while other clients move amounts between them: every
/// sum it reads must be `want`.
pub struct SumReader {
    done: Arc<AtomicBool>,
    thread: JoinHandle<usize>,
}

impl SumReader {
    /// Starts reading from `addr`, naming `keys` as the script's keys if
    /// `declared`, else as its arguments.
    pub fn spawn(addr: String, keys: Vec<String>, declared: bool, want: i64) -> SumReader {
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let mut con = connect(&addr);
            let sum = redis::Script::new(if declared { SUM_OF_KEYS } else { SUM_OF_ARGV });
            let mut checks = 0;
            while !stop.load(Ordering::Acquire) || checks == 0 {
                let mut inv = sum.prepare_invoke();
                for k in &keys {
                    if declared {
                        inv.key(k);
                    } else {
                        inv.arg(k);
                    }
                }
                let n: i64 = inv.invoke(&mut con).unwrap();
                assert_eq!(n, want, "a script saw a move half done");
                checks += 1;
                if checks > CHECKS_MAX {
                    break;
                }
            }
            checks
        });
        SumReader { done, thread }
    }

    /// Stops the reader once the movers are done; it must have read at
    /// least once.
    pub fn finish(self) {
        self.done.store(true, Ordering::Release);
        let checks = self.thread.join().unwrap();
        assert!(checks > 0, "the reader read no sum");
    }
}
