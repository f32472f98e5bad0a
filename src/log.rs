//! Redis-style log lines (`pid:M 22 Nov 2026 05:11:15.123 * message`) to
//! stdout or the `logfile`, filtered by `loglevel`. Only connection and
//! lifecycle events log; the request path never does.
//!
//! Process state by nature (one stdout, one `logfile`): the level and the
//! file below are the process's, not a server's, as Redis's are.

use std::fmt::Arguments;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use config::LogLevel;

static LEVEL: AtomicU8 = AtomicU8::new(2);
static FILE: Mutex<Option<std::fs::File>> = Mutex::new(None);

fn rank(l: LogLevel) -> u8 {
    match l {
        LogLevel::Debug => 0,
        LogLevel::Verbose => 1,
        LogLevel::Notice => 2,
        LogLevel::Warning => 3,
        LogLevel::Nothing => 4,
    }
}

/// Sets the level and the destination (`None`: stdout).
pub fn init(level: LogLevel, file: Option<&std::path::Path>) -> std::io::Result<()> {
    set_level(level);
    if let Some(p) = file {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)?;
        *FILE.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    }
    Ok(())
}

pub fn set_level(level: LogLevel) {
    LEVEL.store(rank(level), Ordering::Relaxed);
}

fn emit(r: u8, sym: char, args: Arguments<'_>) {
    if r < LEVEL.load(Ordering::Relaxed) || LEVEL.load(Ordering::Relaxed) >= 4 {
        return;
    }
    let line = format!(
        "{}:M {} {} {}\n",
        std::process::id(),
        timestamp(),
        sym,
        args
    );
    let mut f = FILE.lock().unwrap_or_else(|e| e.into_inner());
    match f.as_mut() {
        Some(f) => {
            let _ = f.write_all(line.as_bytes());
        }
        None => {
            let _ = std::io::stdout().lock().write_all(line.as_bytes());
        }
    }
}

pub fn verbose(args: Arguments<'_>) {
    emit(1, '-', args)
}
pub fn notice(args: Arguments<'_>) {
    emit(2, '*', args)
}
pub fn warning(args: Arguments<'_>) {
    emit(3, '#', args)
}

/// `22 Nov 2026 05:11:15.123` in UTC.
fn timestamp() -> String {
    let ms = engine::now_ms();
    let secs = ms / 1000;
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let (y, m, d) = civil_from_days(days);
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{:02} {} {} {:02}:{:02}:{:02}.{:03}",
        d,
        MON[(m - 1) as usize],
        y,
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }
}
