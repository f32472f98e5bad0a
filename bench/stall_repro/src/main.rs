//! Reproduces tests/transactions.rs dropped_msets_are_all_or_nothing against a running
//! server: 3 droppers (GET big + MSET then RST), 2 readers looping MGET. Reports MGETs
//! slower than a threshold, and runs ./snap.sh once per stall while it lasts.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: usize = 3;
const GROUPS: usize = 4;
const DROPPERS: usize = 3;
const DROPS: usize = 400;

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}
fn shard(k: &str) -> usize {
    (crc16(k.as_bytes()) as usize % 16384) * SHARDS / 16384
}
fn keys(prefix: &str) -> Vec<String> {
    (0..SHARDS)
        .map(|i| {
            (0..10000)
                .map(|n| format!("{prefix}{i}.{n}"))
                .find(|k| shard(k) == i % SHARDS)
                .unwrap()
        })
        .collect()
}
fn enc(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend(format!("${}\r\n", a.len()).as_bytes());
        v.extend(*a);
        v.extend(b"\r\n");
    }
    v
}
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
/// Reads one full reply (only the shapes used here), returns it raw.
fn read_reply(s: &mut TcpStream, buf: &mut Vec<u8>) -> Vec<u8> {
    loop {
        if let Some(n) = complete(buf, 0) {
            let r = buf[..n].to_vec();
            buf.drain(..n);
            return r;
        }
        let mut tmp = [0u8; 65536];
        let n = s.read(&mut tmp).expect("read");
        assert!(n > 0, "EOF");
        buf.extend(&tmp[..n]);
    }
}
fn line(b: &[u8], at: usize) -> Option<(usize, &[u8])> {
    let p = b[at..].windows(2).position(|w| w == b"\r\n")?;
    Some((at + p + 2, &b[at..at + p]))
}
fn complete(b: &[u8], at: usize) -> Option<usize> {
    let (next, l) = line(b, at)?;
    match l[0] {
        b'*' => {
            let n: i64 = std::str::from_utf8(&l[1..]).unwrap().parse().unwrap();
            let mut p = next;
            for _ in 0..n.max(0) {
                p = complete(b, p)?;
            }
            Some(p)
        }
        b'$' => {
            let n: i64 = std::str::from_utf8(&l[1..]).unwrap().parse().unwrap();
            if n < 0 {
                return Some(next);
            }
            let end = next + n as usize + 2;
            (b.len() >= end).then_some(end)
        }
        _ => Some(next),
    }
}
extern "C" {
    fn setsockopt(fd: i32, level: i32, name: i32, val: *const u8, len: u32) -> i32;
}
fn linger0(s: &TcpStream) {
    let v: [i32; 2] = [1, 0];
    unsafe { setsockopt(s.as_raw_fd(), 1, 13, v.as_ptr() as *const u8, 8) };
}

/// CPU time (user + system) the server has used so far, in ms, if
/// `SERVER_PID` names it: what a wait cost in server work, which a loaded
/// machine does not stretch as it stretches wall time.
fn server_cpu_ms() -> Option<u64> {
    let pid = std::env::var("SERVER_PID").ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's name, which ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime: fields 14 and 15 of the line, in clock ticks (100 Hz).
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let addr = format!("127.0.0.1:{}", a[1]);
    let runs: usize = a.get(2).map_or(1, |s| s.parse().unwrap());
    let thresh = Duration::from_millis(a.get(3).map_or(700, |s| s.parse().unwrap()));
    let groups: Arc<Vec<Vec<String>>> =
        Arc::new((0..GROUPS).map(|g| keys(&format!("aon{g}:"))).collect());
    let epoch = Instant::now();
    // Reader r's in-flight MGET: start (µs since epoch, 0: none) and its local port.
    let inflight: Arc<Vec<(AtomicU64, AtomicU64)>> =
        Arc::new((0..2).map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect());
    {
        let inflight = inflight.clone();
        std::thread::spawn(move || {
            let mut snapped = [0u64; 2];
            loop {
                std::thread::sleep(Duration::from_millis(20));
                let now = epoch.elapsed().as_micros() as u64;
                for r in 0..2 {
                    let t0 = inflight[r].0.load(Ordering::SeqCst);
                    if t0 != 0 && now.saturating_sub(t0) > thresh.as_micros() as u64 && snapped[r] != t0 {
                        snapped[r] = t0;
                        let port = inflight[r].1.load(Ordering::SeqCst);
                        eprintln!("[drv] reader {r} (port {port}) stalled {} ms: snapshot", now.saturating_sub(t0) / 1000);
                        let _ = std::process::Command::new("./snap.sh")
                            .arg(port.to_string())
                            .arg(r.to_string())
                            .status();
                    }
                }
            }
        });
    }
    let mut slow_total = 0;
    for run in 0..runs {
        let mut c = TcpStream::connect(&addr).unwrap();
        let big = vec![b'x'; 256 << 10];
        c.write_all(&enc(&[b"SET", b"aon:big", &big])).unwrap();
        let mut buf = Vec::new();
        read_reply(&mut c, &mut buf);
        drop(c);
        let running = Arc::new(AtomicUsize::new(DROPPERS));
        let slow = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for d in 0..DROPPERS {
            let (groups, addr, running) = (groups.clone(), addr.clone(), running.clone());
            hs.push(std::thread::spawn(move || {
                let mut rng = Rng(d as u64 + 1 + run as u64 * 7919);
                for i in 0..DROPS {
                    let ks = &groups[rng.below(GROUPS)];
                    let pause = Duration::from_micros(rng.below(100) as u64);
                    let tok = format!("d{d}-{i}");
                    let mut args: Vec<&[u8]> = vec![b"MSET"];
                    for k in ks {
                        args.push(k.as_bytes());
                        args.push(tok.as_bytes());
                    }
                    let Ok(mut s) = TcpStream::connect(&addr) else { continue };
                    linger0(&s);
                    let mut wire = enc(&[b"GET", b"aon:big"]);
                    wire.extend(enc(&args));
                    let _ = s.write(&wire);
                    let t0 = Instant::now();
                    while t0.elapsed() < pause {
                        std::hint::spin_loop();
                    }
                    drop(s);
                }
                if running.fetch_sub(1, Ordering::SeqCst) == 1 {
                    eprintln!("[drv] run {run} droppers done at {:?}", epoch.elapsed());
                }
            }));
        }
        for r in 0..2 {
            let (groups, addr, running, inflight, slow) =
                (groups.clone(), addr.clone(), running.clone(), inflight.clone(), slow.clone());
            hs.push(std::thread::spawn(move || {
                let mut rng = Rng(100 + r as u64 + run as u64 * 31);
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_nodelay(true).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let port = s.local_addr().unwrap().port() as u64;
                let mut buf = Vec::new();
                let (mut first_ms, mut max_ms, mut count) = (None, 0u128, 0u64);
                let mut first_cpu_ms = None;
                if std::env::var("DRV_PING").is_ok() {
                    // A command with no key and no hop first: tells a busy
                    // home thread from a wait for locks.
                    let t0 = Instant::now();
                    s.write_all(&enc(&[b"PING"])).unwrap();
                    read_reply(&mut s, &mut buf);
                    eprintln!("[drv] run {run} reader {r}: PING {} ms", t0.elapsed().as_millis());
                }
                while running.load(Ordering::SeqCst) > 0 {
                    let ks = &groups[rng.below(GROUPS)];
                    let mut args: Vec<&[u8]> = vec![b"MGET"];
                    args.extend(ks.iter().map(|k| k.as_bytes()));
                    let t0 = Instant::now();
                    let cpu0 = server_cpu_ms();
                    inflight[r].1.store(port, Ordering::SeqCst);
                    inflight[r].0.store(epoch.elapsed().as_micros() as u64 + 1, Ordering::SeqCst);
                    s.write_all(&enc(&args)).unwrap();
                    let rep = read_reply(&mut s, &mut buf);
                    inflight[r].0.store(0, Ordering::SeqCst);
                    let dt = t0.elapsed();
                    first_ms.get_or_insert(dt.as_millis());
                    if first_cpu_ms.is_none() {
                        first_cpu_ms = Some(cpu0.zip(server_cpu_ms()).map_or(0, |(a, b)| b - a));
                    }
                    max_ms = max_ms.max(dt.as_millis());
                    count += 1;
                    if dt > Duration::from_millis(std::env::var("DRV_REPORT_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(500)) {
                        slow.fetch_add(1, Ordering::SeqCst);
                        eprintln!("[drv] run {run} reader {r}: MGET took {} ms, done at {:?} (reply {:?})", dt.as_millis(), epoch.elapsed(), String::from_utf8_lossy(&rep));
                    }
                }
                // One line per reader and run, for before/after tables (bench/README.md).
                eprintln!(
                    "[drv] run {run} reader {r}: first MGET {} ms (server CPU {} ms), slowest {max_ms} ms, {count} MGETs",
                    first_ms.unwrap_or(0),
                    first_cpu_ms.unwrap_or(0)
                );
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        slow_total += slow.load(Ordering::SeqCst);
        if run % 50 == 49 {
            eprintln!("[drv] {} runs done, {slow_total} slow, {:?}", run + 1, epoch.elapsed());
        }
    }
    eprintln!("[drv] done {runs} runs, {slow_total} slow, server CPU {:?} ms in all", server_cpu_ms());
}
