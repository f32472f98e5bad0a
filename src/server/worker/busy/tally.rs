//! What a desk's passes and a lent inbox answered and refused, counted
//! apart while the loop's own statistics are lent to the running script
//! ([`Tally`]), and added to them when it ends.

use commands::ThreadStats;

/// The statistics of what a desk served (the commands it answered, the
/// requests it refused) while the loop's own are lent to the running
/// script: added to the loop's when the script ends ([`Tally::settle`]),
/// before the loop handles anything else, so INFO counts them as Redis
/// does (commandstats `calls` and `rejected_calls`, errorstats,
/// `total_error_replies`, the network bytes). Allocated on a desk's first
/// count.
#[derive(Default)]
pub(crate) struct Tally(Option<Box<ThreadStats>>);

impl Tally {
    pub(super) fn get(&mut self) -> &mut ThreadStats {
        self.0.get_or_insert_with(Default::default)
    }

    /// Moves everything counted here into `into`: a flag test when
    /// nothing was (every refusal replies an error, every answer is a
    /// call).
    /// (Inline: every lend settles, nearly always with nothing counted.)
    #[inline]
    pub(in crate::server::worker) fn settle(&mut self, into: &mut ThreadStats) {
        if let Some(t) = self.0.as_deref_mut() {
            Self::settle_counted(t, into);
        }
    }

    #[cold]
    fn settle_counted(t: &mut ThreadStats, into: &mut ThreadStats) {
        into.net_input_bytes += std::mem::take(&mut t.net_input_bytes);
        into.net_output_bytes += std::mem::take(&mut t.net_output_bytes);
        if t.total_commands == 0 && t.total_error_replies == 0 {
            return;
        }
        for (a, b) in into.cmd.iter_mut().zip(t.cmd.iter_mut()) {
            a.calls += b.calls;
            a.usec += b.usec;
            a.rejected_calls += b.rejected_calls;
            a.failed_calls += b.failed_calls;
            *b = Default::default();
        }
        for (id, h) in t.hist.iter().enumerate() {
            if let Some(h) = h {
                into.histogram(id).merge(h);
            }
        }
        t.hist.clear();
        for (code, n) in t.errors.drain(..) {
            if let Some((_, m)) = into.errors.iter_mut().find(|(c, _)| *c == code) {
                *m += n;
            } else if into.errors.len() < 128 {
                // The same bound as `ThreadStats::count_error`'s.
                into.errors.push((code, n));
            }
        }
        into.total_commands += std::mem::take(&mut t.total_commands);
        into.total_error_replies += std::mem::take(&mut t.total_error_replies);
        into.unexpected_error_replies += std::mem::take(&mut t.unexpected_error_replies);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything a desk counted reaches the loop's statistics once, and
    /// the tally is empty afterwards.
    #[test]
    fn a_tally_moves_every_count_into_the_loop_statistics() {
        let reg = commands::registry();
        let (get, _) = reg.top(b"get").unwrap();
        let (watch, _) = reg.top(b"watch").unwrap();
        let mut into = ThreadStats::default();
        into.count_error(b"ERR x");
        let mut t = Tally::default();
        t.settle(&mut into);
        assert!(t.0.is_none(), "nothing allocated before a count");

        let s = t.get();
        commands::exec::count_rejected(s, Some(get));
        s.count_error(b"BUSY Redis is busy");
        s.count_error(b"ERR unknown command");
        s.cmd[watch].calls += 1;
        s.cmd[watch].usec += 5;
        s.total_commands += 1;
        s.net_input_bytes += 40;
        s.net_output_bytes += 90;
        for _ in 0..2 {
            t.settle(&mut into);
        }
        assert_eq!(into.cmd[get].rejected_calls, 1);
        assert_eq!((into.cmd[watch].calls, into.cmd[watch].usec), (1, 5));
        assert_eq!(into.total_commands, 1);
        assert_eq!(into.total_error_replies, 3);
        let mut errors = into.errors.clone();
        errors.sort();
        assert_eq!(errors, vec![("BUSY".into(), 1), ("ERR".into(), 2)]);
        assert_eq!((into.net_input_bytes, into.net_output_bytes), (40, 90));
    }
}
