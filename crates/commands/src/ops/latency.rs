//! LATENCY (Redis's `latency.c`): the latency monitor's events and the
//! per-command histograms.
//!
//! * Events: a call that took `latency-monitor-threshold` milliseconds or
//!   more adds a sample to the event `command` (`fast-command` for a
//!   command flagged fast). Each event keeps its last 160 seconds with a
//!   sample (the worst of each second) and its all-time maximum, behind
//!   one mutex that only such slow calls take. LATEST / HISTORY / RESET /
//!   GRAPH / DOCTOR read them.
//! * Histograms ([`super::hist::Hist`]) live per thread in `ThreadStats`
//!   (no sharing on the request path); LATENCY HISTOGRAM and INFO
//!   latencystats ask every thread for its own and add them up.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use resp::{Args, Reply};

use super::hist::Hist;
use crate::coord::{fan_out, Coordinator};
use crate::ctx::{ClientState, ConnCtx};
use crate::error::CmdError;
use crate::table::registry;

/// Redis's `LATENCY_TS_LEN`.
const TS_LEN: usize = 160;
/// Redis's `LATENCY_GRAPH_COLS`.
const GRAPH_COLS: usize = 80;

#[derive(Clone, Copy, Default)]
pub(crate) struct Sample {
    time_s: u64,
    latency_ms: u64,
}

/// One event's samples: a ring of [`TS_LEN`], `idx` the next to write.
struct Series {
    idx: usize,
    max: u64,
    samples: [Sample; TS_LEN],
}

/// The latency monitor (see the module documentation).
#[derive(Default)]
pub struct Latency {
    /// `latency-monitor-threshold` (ms); 0: off.
    pub threshold_ms: AtomicU64,
    // Sorted by name: Redis lists its dict in hash order, which no client
    // can rely on.
    events: Mutex<BTreeMap<&'static str, Box<Series>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn now_s() -> u64 {
    engine::now_ms() / 1000
}

impl Latency {
    /// Whether a latency of `ms` is an event (Redis's
    /// `latencyAddSampleIfNeeded`).
    #[inline]
    pub fn wants(&self, ms: u64) -> bool {
        let t = self.threshold_ms.load(Ordering::Relaxed);
        t != 0 && ms >= t
    }

    /// Redis's `latencyAddSampleIfNeeded` for `event`, which took the
    /// time since `started` (one relaxed load below the threshold).
    #[inline]
    pub fn add_if_needed(&self, event: &'static str, started: std::time::Instant) {
        let ms = started.elapsed().as_millis() as u64;
        if self.wants(ms) {
            self.add(event, ms);
        }
    }

    #[cold]
    pub fn command_sample(&self, fast: bool, ms: u64) {
        self.add(if fast { "fast-command" } else { "command" }, ms);
    }

    /// Redis's `latencyAddSample`: one sample per second, the worst.
    pub fn add(&self, event: &'static str, ms: u64) {
        let now = now_s();
        let mut ev = lock(&self.events);
        let ts = ev.entry(event).or_insert_with(|| {
            Box::new(Series {
                idx: 0,
                max: 0,
                samples: [Sample::default(); TS_LEN],
            })
        });
        ts.max = ts.max.max(ms);
        let prev = (ts.idx + TS_LEN - 1) % TS_LEN;
        if ts.samples[prev].time_s == now {
            ts.samples[prev].latency_ms = ts.samples[prev].latency_ms.max(ms);
            return;
        }
        ts.samples[ts.idx] = Sample {
            time_s: now,
            latency_ms: ms,
        };
        ts.idx = (ts.idx + 1) % TS_LEN;
    }

    /// The samples of `event`, oldest first.
    pub(crate) fn history(&self, event: &[u8]) -> Option<(u64, Vec<Sample>)> {
        let ev = lock(&self.events);
        let (_, ts) = ev.iter().find(|(n, _)| n.as_bytes() == event)?;
        let v = (0..TS_LEN)
            .map(|j| ts.samples[(ts.idx + j) % TS_LEN])
            .filter(|s| s.time_s != 0)
            .collect();
        Some((ts.max, v))
    }
}

pub(crate) fn latency_latest(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let ev = lock(&c.server.ops.latency.events);
    c.out.array(ev.len());
    for (name, ts) in ev.iter() {
        let last = ts.samples[(ts.idx + TS_LEN - 1) % TS_LEN];
        c.out.array(4);
        c.out.bulk(name.as_bytes());
        c.out.int(last.time_s as i64);
        c.out.int(last.latency_ms as i64);
        c.out.int(ts.max as i64);
    }
    Ok(())
}

pub(crate) fn latency_history(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let samples = c
        .server
        .ops
        .latency
        .history(args.get(2))
        .map(|(_, v)| v)
        .unwrap_or_default();
    c.out.array(samples.len());
    for s in samples {
        c.out.array(2);
        c.out.int(s.time_s as i64);
        c.out.int(s.latency_ms as i64);
    }
    Ok(())
}

/// LATENCY RESET [event ...]: the number of events forgotten.
pub(crate) fn latency_reset(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut ev = lock(&c.server.ops.latency.events);
    let n = if args.len() == 2 {
        let n = ev.len();
        ev.clear();
        n
    } else {
        let mut n = 0;
        for a in args.iter().skip(2) {
            let found = ev.keys().find(|k| k.as_bytes() == a).copied();
            if let Some(k) = found {
                ev.remove(k);
                n += 1;
            }
        }
        n
    };
    c.out.int(n as i64);
    Ok(())
}

/// Redis's label of a sample: seconds, minutes, hours or days ago.
fn ago(elapsed: u64) -> String {
    match elapsed {
        e if e < 60 => format!("{e}s"),
        e if e < 3600 => format!("{}m", e / 60),
        e if e < 86400 => format!("{}h", e / 3600),
        e => format!("{}d", e / 86400),
    }
}

/// Redis's `sparklineRenderRange` with `SPARKLINE_FILL`, 4 rows, one label
/// per sample under it.
fn sparkline(out: &mut String, values: &[(u64, String)], min: f64, max: f64) {
    const FILL: &[u8] = b"_o#";
    const ROWS: usize = 4;
    let steps = (FILL.len() * ROWS) as f64;
    let relmax = if max - min == 0.0 { 1.0 } else { max - min };
    let mut row = 0;
    loop {
        let mut line = vec![b' '; values.len()];
        let mut more = false;
        for (j, (v, label)) in values.iter().enumerate() {
            let relval = *v as f64 - min;
            // C's `(int)(relval*steps)/relmax`, then truncated again.
            let step = (((relval * steps) as i64) as f64 / relmax) as i64;
            let step = step.clamp(0, steps as i64 - 1);
            if row < ROWS {
                more = true;
                let idx = step - ((ROWS - row - 1) * FILL.len()) as i64;
                if (0..FILL.len() as i64).contains(&idx) {
                    line[j] = FILL[idx as usize];
                } else if idx >= FILL.len() as i64 {
                    line[j] = b'|';
                }
            } else if row == ROWS {
                // One blank line between the graph and the labels.
                more = true;
                break;
            } else {
                let k = row - ROWS - 1;
                if let Some(&ch) = label.as_bytes().get(k) {
                    more = true;
                    line[j] = ch;
                }
            }
        }
        if !more {
            break;
        }
        row += 1;
        out.push_str(&String::from_utf8_lossy(&line));
        out.push('\n');
    }
}

/// LATENCY GRAPH event: Redis's ASCII graph of the event's samples.
pub(crate) fn latency_graph(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let event = args.get(2);
    let Some((all_max, samples)) = c.server.ops.latency.history(event) else {
        return Err(CmdError::err_echo(
            "No samples available for event '",
            event,
            "'",
        ));
    };
    let now = now_s();
    let lo = samples.iter().map(|s| s.latency_ms).min().unwrap_or(0);
    let hi = samples.iter().map(|s| s.latency_ms).max().unwrap_or(0);
    let mut g = String::new();
    let _ = writeln!(
        g,
        "{} - high {hi} ms, low {lo} ms (all time high {all_max} ms)",
        String::from_utf8_lossy(event)
    );
    g.push_str(&"-".repeat(GRAPH_COLS));
    g.push('\n');
    let values: Vec<(u64, String)> = samples
        .iter()
        .map(|s| (s.latency_ms, ago(now.saturating_sub(s.time_s))))
        .collect();
    for (i, chunk) in values.chunks(GRAPH_COLS).enumerate() {
        if i > 0 {
            g.push('\n');
        }
        sparkline(&mut g, chunk, lo as f64, hi as f64);
    }
    c.out.verbatim("txt", g.as_bytes());
    Ok(())
}

/// LATENCY DOCTOR: Redis's report, for the events Tessera records
/// (`command`, `fast-command`).
pub(crate) fn latency_doctor(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    let ops = c.server.ops;
    let threshold = ops.latency.threshold_ms.load(Ordering::Relaxed);
    let (slower_than, max_len) = (
        ops.slowlog.threshold_us.load(Ordering::Relaxed),
        ops.slowlog.max_len.load(Ordering::Relaxed),
    );
    let ev = lock(&ops.latency.events);
    let mut r = String::new();
    if ev.is_empty() && threshold == 0 {
        r.push_str(
            "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis \
             instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in \
             order to enable it. If we weren't in a deep space mission I'd suggest to take a \
             look at https://redis.io/topics/latency-monitor.\n",
        );
        c.out.verbatim("txt", r.as_bytes());
        return Ok(());
    }
    let (mut slowlog_enable, mut slowlog_tune, mut inspect, mut scheduler) =
        (false, false, false, false);
    let mut advices = 0;
    let now = now_s();
    for (n, (name, ts)) in ev.iter().enumerate() {
        if n == 0 {
            r.push_str(
                "Dave, I have observed latency spikes in this Redis instance. You don't mind \
                 talking about it, do you Dave?\n\n",
            );
        }
        // Redis's analyzeLatencyForEvent.
        let live: Vec<Sample> = ts
            .samples
            .iter()
            .copied()
            .filter(|s| s.time_s != 0)
            .collect();
        let count = live.len() as u64;
        let sum: u64 = live.iter().map(|s| s.latency_ms).sum();
        let avg = sum.checked_div(count).unwrap_or(0);
        let period = match live.iter().map(|s| s.time_s).min() {
            Some(oldest) => now.saturating_sub(oldest).max(1),
            None => 0,
        };
        let deviations: u64 = live.iter().map(|s| avg.abs_diff(s.latency_ms)).sum();
        let mad = deviations.checked_div(count).unwrap_or(0);
        let _ = write!(
            r,
            "{}. {name}: {count} latency spikes (average {avg}ms, mean deviation {mad}ms, \
             period {:.2} sec). Worst all time event {}ms.",
            n + 1,
            period as f64 / count.max(1) as f64,
            ts.max
        );
        if *name == "command" {
            if slower_than < 0 || max_len == 0 {
                slowlog_enable = true;
                advices += 1;
            } else if (slower_than / 1000) as u64 > threshold {
                slowlog_tune = true;
                advices += 1;
            }
            inspect = true;
            advices += 2;
        }
        if *name == "fast-command" {
            scheduler = true;
            advices += 1;
        }
        r.push('\n');
    }
    if ev.is_empty() && advices == 0 {
        r.push_str(
            "Dave, no latency spike was observed during the lifetime of this Redis instance, \
             not in the slightest bit. I honestly think you ought to sleep tonight.\n",
        );
    } else if advices == 0 {
        r.push_str(
            "\nWhile there are latency events logged, I'm not able to suggest any easy fix. \
             Please use the Redis community to get some help, providing this report in your \
             request.\n",
        );
    } else {
        r.push_str("\nI have a few advices for you:\n\n");
        if slowlog_enable {
            let _ = writeln!(
                r,
                "- There are latency issues with potentially slow commands you are using. Try \
                 to enable the Slow Log Redis feature using the command 'CONFIG SET \
                 slowlog-log-slower-than {}'. If the Slow log is disabled Redis is not able to \
                 log slow commands execution for you.",
                threshold * 1000
            );
        }
        if slowlog_tune {
            let _ = writeln!(
                r,
                "- Your current Slow Log configuration only logs events that are slower than \
                 your configured latency monitor threshold. Please use 'CONFIG SET \
                 slowlog-log-slower-than {}'.",
                threshold * 1000
            );
        }
        if inspect {
            r.push_str(
                "- Check your Slow Log to understand what are the commands you are running \
                 which are too slow to execute. Please check https://redis.io/commands/slowlog \
                 for more information.\n",
            );
        }
        if scheduler {
            r.push_str(
                "- The system is slow to execute Redis code paths not containing system calls. \
                 This usually means the system does not provide Redis CPU time to run for long \
                 periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer \
                 / VM just for Redis if you are running other software in the same system.\n  \
                 3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with \
                 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your \
                 system.\n  5) Check if the problem is allocator-related by recompiling Redis \
                 with MALLOC=libc, if you are using Jemalloc. However this may create \
                 fragmentation problems.\n",
            );
        }
        if inspect {
            r.push_str(
                "- Deleting, expiring or evicting (because of maxmemory policy) large objects \
                 is a blocking operation. If you have very large objects that are often \
                 deleted, expired, or evicted, try to fragment those objects into multiple \
                 smaller objects.\n",
            );
        }
    }
    c.out.verbatim("txt", r.as_bytes());
    Ok(())
}

/// Every thread's histograms of the commands `ids` (all with a histogram
/// when empty), added up: `(id, histogram)` in `ids` order.
fn merged(parts: Vec<Vec<(usize, Hist)>>) -> BTreeMap<usize, Hist> {
    let mut m: BTreeMap<usize, Hist> = BTreeMap::new();
    for (id, h) in parts.into_iter().flatten() {
        match m.get_mut(&id) {
            Some(a) => a.merge(&h),
            None => {
                m.insert(id, h);
            }
        }
    }
    m
}

/// One LATENCY HISTOGRAM value: `{calls, histogram_usec: {usec: count}}`.
fn cdf_reply(out: &mut Reply, h: &Hist) {
    out.map(2);
    out.bulk(b"calls");
    out.int(h.total as i64);
    out.bulk(b"histogram_usec");
    let cdf = h.cdf();
    out.map(cdf.len());
    for (us, n) in cdf {
        out.int(us as i64);
        out.int(n as i64);
    }
}

/// The ids LATENCY HISTOGRAM names: each command, then its subcommands
/// (unknown names skipped; `client|id` names a subcommand).
fn histogram_ids(args: Args<'_>) -> Option<Vec<usize>> {
    if args.len() == 2 {
        return None;
    }
    let reg = registry();
    let mut ids = Vec::new();
    for a in args.iter().skip(2) {
        let Some(id) = reg
            .specs
            .iter()
            .position(|(n, _, _)| n.as_bytes().eq_ignore_ascii_case(a))
        else {
            continue;
        };
        ids.push(id);
        let spec = reg.specs[id].1;
        ids.extend(
            (0..reg.len()).filter(|&i| reg.specs[i].2.is_some_and(|p| std::ptr::eq(p, spec))),
        );
    }
    Some(ids)
}

/// LATENCY HISTOGRAM [command ...]: a map command -> its histogram, for
/// the commands called since the last CONFIG RESETSTAT.
pub(crate) fn latency_histogram(
    c: &mut ConnCtx<'_>,
    args: Args<'_>,
) -> Result<Box<dyn Coordinator>, CmdError> {
    let ids = histogram_ids(args);
    let wanted = ids.clone();
    Ok(fan_out(
        c.nshards(),
        move |env| env.stats.histograms(wanted.as_deref()),
        move |parts: Vec<Vec<(usize, Hist)>>, out: &mut Reply, _: &mut ClientState| {
            let m = merged(parts);
            let order: Vec<usize> = match ids {
                Some(ids) => ids.into_iter().filter(|i| m.contains_key(i)).collect(),
                // Redis lists its command dict in hash order; by name here.
                None => {
                    let mut v: Vec<usize> = m.keys().copied().collect();
                    v.sort_by_key(|&i| registry().full_name(i));
                    v
                }
            };
            out.map(order.len());
            for id in order {
                out.bulk(registry().full_name(id).as_bytes());
                cdf_reply(out, &m[&id]);
            }
            Ok(())
        },
    ))
}

/// INFO latencystats: `latency_percentiles_usec_<cmd>:p50=…,p99=…` for
/// every command with a histogram, the percentiles of
/// `latency-tracking-info-percentiles`.
pub(crate) fn info_lines(o: &mut String, parts: Vec<Vec<(usize, Hist)>>, percentiles: &[f64]) {
    let m = merged(parts);
    for (id, h) in m {
        let _ = write!(o, "latency_percentiles_usec_{}:", registry().full_name(id));
        for (j, p) in percentiles.iter().enumerate() {
            if j > 0 {
                o.push(',');
            }
            let _ = write!(
                o,
                "p{}={:.3}",
                config::format_percentile(*p),
                h.percentile(*p) as f64 / 1000.0
            );
        }
        o.push_str("\r\n");
    }
}

pub(crate) fn latency_help(c: &mut ConnCtx<'_>, _args: Args<'_>) -> Result<(), CmdError> {
    crate::docs::reply_help(
        c.out,
        "LATENCY",
        &[
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram \
             for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_the_worst() {
        let l = Latency::default();
        l.add("command", 5);
        l.add("command", 9);
        l.add("command", 7);
        let (max, v) = l.history(b"command").unwrap();
        assert_eq!(max, 9);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].latency_ms, 9);
        assert!(l.history(b"nope").is_none());
    }

    #[test]
    fn sparkline_as_redis() {
        // Two samples, low and high: the high one fills all four rows.
        let mut g = String::new();
        sparkline(
            &mut g,
            &[(100, "2s".into()), (300, "1s".into())],
            100.0,
            300.0,
        );
        assert_eq!(g, " #\n |\n |\n_|\n  \n21\nss\n");
    }
}
