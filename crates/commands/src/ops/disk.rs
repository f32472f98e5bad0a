//! Why writes are refused for the disk (Redis's
//! `writeCommandsDeniedByDiskError`): a failed save with
//! `stop-writes-on-bgsave-error` on, or an AOF that cannot be written or
//! fsynced. One word, so that admission (every command) and a script's
//! write pay one relaxed load while nothing failed; deciding which error
//! and building its text happen only when something did.
//!
//! Who sets what: the snapshot writer the save's outcome
//! ([`DiskStatus::set_save_failed`]), `Ops::configure` whether a failed
//! save refuses writes, the AOF writer its write and fsync status with the
//! errno Redis shows (`aof_last_write_errno`). A replica's master is
//! not refused: [`DiskStatus::obey_anyway`] decides. Each update is one
//! read-modify-write of the word; readers see any mix of the latest
//! updates, which is all a refusal needs (Redis reads the same fields
//! unlocked from its main thread while its fsync thread sets them).

use std::sync::atomic::{AtomicU64, Ordering};

/// The disk's status word (see the module docs).
#[derive(Debug, Default)]
pub struct DiskStatus {
    word: AtomicU64,
    /// When [`DiskStatus::obey_anyway`] last logged (ms since the epoch).
    obeyed_log_ms: AtomicU64,
    /// DEBUG AOF-FLUSH-SLEEP: microseconds the AOF writer sleeps before
    /// each write of its buffer (Redis's `aof_flush_sleep`, a test hook).
    pub aof_flush_sleep_us: AtomicU64,
}

/// The last save failed.
const SAVE_FAILED: u64 = 1;
/// `stop-writes-on-bgsave-error yes` with save rules set.
const STOP_ON_SAVE_ERROR: u64 = 1 << 1;
/// The last write to the AOF failed (Redis's `aof_last_write_status`).
const AOF_WRITE_FAILED: u64 = 1 << 2;
/// The last fsync of the AOF failed (Redis's `aof_bio_fsync_status`).
const AOF_FSYNC_FAILED: u64 = 1 << 3;
/// The errno of the AOF's failure sits in the upper half.
const ERRNO_SHIFT: u32 = 32;
const LOW: u64 = (1 << ERRNO_SHIFT) - 1;

/// A reason to refuse writes, in Redis's order (a failed save first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskError {
    /// A failed save (`shared.bgsaveerr`).
    Save,
    /// The AOF cannot be written or fsynced: the errno Redis shows.
    Aof(i32),
}

impl DiskError {
    /// Redis's `writeCommandsGetDiskErrorMessage`, without the `-`.
    pub fn text(self) -> String {
        match self {
            DiskError::Save => crate::persist::MISCONF.into(),
            DiskError::Aof(errno) => {
                format!(
                    "MISCONF Errors writing to the AOF file: {}",
                    strerror(errno)
                )
            }
        }
    }
}

/// C's `strerror` text (std's io::Error adds " (os error N)").
pub fn strerror(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

impl DiskStatus {
    pub const fn new() -> DiskStatus {
        DiskStatus {
            word: AtomicU64::new(0),
            obeyed_log_ms: AtomicU64::new(0),
            aof_flush_sleep_us: AtomicU64::new(0),
        }
    }

    /// Whether writes are refused, and why (one relaxed load while
    /// nothing failed).
    #[inline]
    pub fn refusal(&self) -> Option<DiskError> {
        let w = self.word.load(Ordering::Relaxed);
        if w & LOW & !STOP_ON_SAVE_ERROR == 0 {
            return None;
        }
        Self::decode(w)
    }

    #[cold]
    fn decode(w: u64) -> Option<DiskError> {
        if w & (SAVE_FAILED | STOP_ON_SAVE_ERROR) == SAVE_FAILED | STOP_ON_SAVE_ERROR {
            Some(DiskError::Save)
        } else if w & (AOF_WRITE_FAILED | AOF_FSYNC_FAILED) != 0 {
            Some(DiskError::Aof((w >> ERRNO_SHIFT) as u32 as i32))
        } else {
            None
        }
    }

    fn update(&self, f: impl Fn(u64) -> u64) {
        let _ = self
            .word
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| Some(f(w)));
    }

    fn set_bit(&self, bit: u64, on: bool) {
        self.update(|w| if on { w | bit } else { w & !bit });
    }

    /// The last save's outcome.
    pub fn set_save_failed(&self, failed: bool) {
        self.set_bit(SAVE_FAILED, failed);
    }

    /// The last save failed (INFO `rdb_last_bgsave_status`).
    pub fn save_failed(&self) -> bool {
        self.word.load(Ordering::Relaxed) & SAVE_FAILED != 0
    }

    /// Whether a failed save refuses writes.
    pub fn set_stop_on_save_error(&self, on: bool) {
        self.set_bit(STOP_ON_SAVE_ERROR, on);
    }

    /// The AOF's last write failed (`Some(errno)`: with this errno;
    /// `None`: the errno stays as it was, as Redis records it only when it
    /// logs) or succeeded (`ok`).
    pub fn set_aof_write(&self, ok: bool, errno: Option<i32>) {
        self.set_aof(AOF_WRITE_FAILED, ok, errno);
    }

    /// The AOF's last fsync failed with `errno`, or succeeded.
    pub fn set_aof_fsync(&self, ok: bool, errno: Option<i32>) {
        self.set_aof(AOF_FSYNC_FAILED, ok, errno);
    }

    fn set_aof(&self, bit: u64, ok: bool, errno: Option<i32>) {
        self.update(|w| {
            let w = if ok { w & !bit } else { w | bit };
            match errno {
                Some(e) => (w & LOW) | (u64::from(e as u32) << ERRNO_SHIFT),
                None => w,
            }
        });
    }

    /// A replica's master sends a write (or PING) while writes are
    /// refused (Redis's processCommand for `obey_client`): unless
    /// `replica-ignore-disk-write-errors yes`, a write ends the process
    /// (Redis's serverPanic: the replica cannot keep what its master
    /// sends); otherwise it runs (the AOF keeps retrying its record),
    /// logged at most every 10 s.
    #[cold]
    pub fn obey_anyway(&self, ping: bool, ignore: bool) {
        if !ignore && !ping {
            crate::persist::log_warning(
                "Guru Meditation: Replica was unable to write command to disk.",
            );
            std::process::abort();
        }
        let now = engine::now_ms();
        let last = self.obeyed_log_ms.load(Ordering::Relaxed);
        if now > last + 10_000
            && self
                .obeyed_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            crate::persist::log_warning(
                "Replica is applying a command even though it is unable to write to disk.",
            );
        }
    }

    /// The AOF is off (or its writer gone): its errors no longer refuse
    /// writes (Redis checks them only while `aof_state` is not off).
    pub fn clear_aof(&self) {
        self.update(|w| w & !(AOF_WRITE_FAILED | AOF_FSYNC_FAILED));
    }

    /// The AOF's last write and fsync succeeded (INFO
    /// `aof_last_write_status`).
    pub fn aof_ok(&self) -> bool {
        self.word.load(Ordering::Relaxed) & (AOF_WRITE_FAILED | AOF_FSYNC_FAILED) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EFBIG: i32 = 27;
    const ENOSPC: i32 = 28;

    #[test]
    fn nothing_failed_refuses_nothing() {
        let d = DiskStatus::new();
        assert_eq!(d.refusal(), None);
        d.set_stop_on_save_error(true);
        assert_eq!(d.refusal(), None, "the setting alone refuses nothing");
        d.set_save_failed(true);
        assert_eq!(d.refusal(), Some(DiskError::Save));
        d.set_stop_on_save_error(false);
        assert_eq!(d.refusal(), None, "a failed save without the setting");
        assert!(d.save_failed());
    }

    /// Redis's order: a failed save (with the setting) before the AOF.
    #[test]
    fn a_failed_save_comes_before_the_aof() {
        let d = DiskStatus::new();
        d.set_aof_write(false, Some(EFBIG));
        assert_eq!(d.refusal(), Some(DiskError::Aof(EFBIG)));
        d.set_stop_on_save_error(true);
        d.set_save_failed(true);
        assert_eq!(d.refusal(), Some(DiskError::Save));
        d.set_save_failed(false);
        assert_eq!(d.refusal(), Some(DiskError::Aof(EFBIG)));
    }

    /// The errno is kept when a failure records none (Redis records it
    /// only when it logs), and the status clears on success or when the
    /// AOF goes off.
    #[test]
    fn the_aof_status_and_its_errno() {
        let d = DiskStatus::new();
        d.set_aof_write(false, Some(ENOSPC));
        d.set_aof_write(false, None);
        assert_eq!(d.refusal(), Some(DiskError::Aof(ENOSPC)));
        assert!(!d.aof_ok());
        d.set_aof_write(true, None);
        assert_eq!(d.refusal(), None);
        assert!(d.aof_ok());
        d.set_aof_fsync(false, Some(EFBIG));
        assert_eq!(d.refusal(), Some(DiskError::Aof(EFBIG)));
        d.clear_aof();
        assert_eq!(d.refusal(), None);
    }

    #[test]
    fn texts_as_redis_writes_them() {
        assert_eq!(
            DiskError::Aof(EFBIG).text(),
            "MISCONF Errors writing to the AOF file: File too large"
        );
        assert_eq!(
            DiskError::Aof(ENOSPC).text(),
            "MISCONF Errors writing to the AOF file: No space left on device"
        );
        assert_eq!(DiskError::Save.text(), crate::persist::MISCONF);
        assert_eq!(strerror(0), "Success");
    }
}
