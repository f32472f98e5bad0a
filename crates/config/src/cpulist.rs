//! `server_cpulist` (Redis 7's and Valkey's name, alias `server-cpulist`):
//! the CPUs the shard threads are pinned to, thread `i` to the `i`-th CPU
//! of the list (wrapping round when there are more threads than CPUs).
//!
//! The syntax is Redis's `setcpuaffinity.c`: comma-separated items, each a
//! CPU (`8`), an inclusive range (`0-3`), or a range with a step (`0-7:2`
//! is 0, 2, 4, 6). Redis parses it only when a thread starts and silently
//! ignores what it cannot read; here a list that does not parse is a
//! configuration error at start-up (the directive cannot be changed at run
//! time), so a typo is never a server running unpinned unnoticed.

/// CPUs a list may name: Linux's `CPU_SETSIZE`.
pub const MAX_CPUS: usize = 1024;

/// The reason given for a list that does not parse.
pub const INVALID: &str = "Invalid CPU list";

/// The CPUs of `list`, in the order written (`""`: none).
///
/// # Errors
/// [`INVALID`] for an empty item, a non-digit, a range whose end is below
/// its start, a zero step, or a CPU at or past [`MAX_CPUS`]; the list is
/// then not applied at all.
pub fn parse(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    if list.is_empty() {
        return Ok(cpus);
    }
    for item in list.split(',') {
        let (range, step) = match item.split_once(':') {
            Some((r, s)) => (r, number(s)?),
            None => (item, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let a = number(range)?;
                (a, a)
            }
        };
        if a > b || step == 0 || b >= MAX_CPUS {
            return Err(INVALID.into());
        }
        cpus.extend((a..=b).step_by(step));
        if cpus.len() > MAX_CPUS {
            return Err(INVALID.into());
        }
    }
    Ok(cpus)
}

/// A decimal CPU number: digits only (no sign, no spaces), below
/// [`MAX_CPUS`] (a step too).
fn number(s: &str) -> Result<usize, String> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(INVALID.into());
    }
    match s.parse::<usize>() {
        Ok(n) if n < MAX_CPUS => Ok(n),
        _ => Err(INVALID.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_ranges_and_steps() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse("0"), Ok(vec![0]));
        assert_eq!(parse("0-3,8"), Ok(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse("0-7:2"), Ok(vec![0, 2, 4, 6]));
        assert_eq!(parse("1-8:3,0"), Ok(vec![1, 4, 7, 0]));
        assert_eq!(parse("5-5"), Ok(vec![5]));
        assert_eq!(parse("3:2"), Ok(vec![3]), "a single CPU with a step");
        assert_eq!(parse("1023"), Ok(vec![1023]));
    }

    #[test]
    fn what_does_not_parse_is_refused_whole() {
        for bad in [
            ",", "0,", ",0", "a", "-1", "1-", "-", "3-1", "0-3:0", "0-3:", ":2", "0 - 3", " 0",
            "0-3:2:1", "0--3", "1024", "0-1024", "+1", "0x1", "99999", "1,2,x",
        ] {
            assert_eq!(parse(bad), Err(INVALID.to_string()), "{bad:?}");
        }
    }
}
