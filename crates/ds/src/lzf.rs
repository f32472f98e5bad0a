//! LZF, the compression Redis applies to RDB strings (`lzf_c.c` /
//! `lzf_d.c` of liblzf 3.6 as Redis builds it: `HLOG` 16, `VERY_FAST`).
//!
//! The compressor follows liblzf's choices step by step (hash of three
//! bytes, match search, the two-position rehash after a match, the same
//! output-space checks) so that a DUMP of a compressible value gives the
//! bytes Redis gives. One deliberate difference: liblzf leaves its hash
//! table uninitialised (`INIT_HTAB 0`), so a stale slot can point anywhere;
//! ours starts zeroed, which liblzf treats as "no candidate". Any valid
//! LZF stream decodes the same either way.
//!
//! The decompressor checks every length and offset: corrupt input gives
//! `None`, never a panic or an out-of-bounds access, and never writes more
//! than the declared output length.

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

#[inline]
fn idx(h: u32) -> usize {
    // VERY_FAST: ((h >> (3*8 - HLOG)) - h*5) & (HSIZE - 1)
    ((h >> (24 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// The match table, reused across calls on a thread: a snapshot compresses
/// millions of short strings, and zeroing 256 KiB for each one cost more
/// than the compression (a profile of BGSAVE showed 70 % in memset). Each
/// slot is tagged with the call's generation; a slot from an earlier call
/// reads as empty (0), which is what a fresh zeroed table gives.
struct Htab {
    gen: u32,
    slots: Vec<u64>,
}

impl Htab {
    /// Starts a new call: every slot now reads as empty.
    fn reset(&mut self) {
        if self.slots.is_empty() {
            self.slots = vec![0; HSIZE];
        }
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            self.slots.fill(0);
            self.gen = 1;
        }
    }
    #[inline]
    fn get(&self, slot: usize) -> usize {
        let v = self.slots[slot];
        if (v >> 32) as u32 == self.gen {
            v as u32 as usize
        } else {
            0
        }
    }
    #[inline]
    fn set(&mut self, slot: usize, pos: usize) {
        self.slots[slot] = (u64::from(self.gen) << 32) | pos as u64;
    }
}

thread_local! {
    static HTAB: std::cell::RefCell<Htab> = const {
        std::cell::RefCell::new(Htab { gen: 0, slots: Vec::new() })
    };
}

/// Compresses `input` into at most `out_len` bytes; `None` when the result
/// would not fit (liblzf's `lzf_compress` returning 0).
pub fn compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    if input.is_empty() || out_len == 0 {
        return None;
    }
    HTAB.with(|h| {
        let mut h = h.borrow_mut();
        h.reset();
        compress_with(input, out_len, &mut h)
    })
}

fn compress_with(input: &[u8], out_len: usize, htab: &mut Htab) -> Option<Vec<u8>> {
    let in_len = input.len();
    // Slot value 0 = "no candidate" (offset 0 never passes `ref > 0`).
    // Room for liblzf's final unchecked literal tail (at most 3 bytes past
    // its last check) so indexing stays in bounds; the length is checked
    // at the end.
    let mut out = vec![0u8; out_len + MAX_LIT + 4];
    let out_end = out_len;
    let mut ip = 0usize;
    let mut op = 1usize; // start run
    let mut lit: usize = 0;
    let frst = |p: usize| -> u32 {
        (u32::from(input[p]) << 8) | u32::from(*input.get(p + 1).unwrap_or(&0))
    };
    let mut hval = frst(0);
    while in_len >= 3 && ip < in_len - 2 {
        hval = (hval << 8) | u32::from(input[ip + 2]);
        let slot = idx(hval);
        let r = htab.get(slot);
        htab.set(slot, ip);
        let matched = r > 0
            && r < ip
            && ip - r - 1 < MAX_OFF
            && input[r + 2] == input[ip + 2]
            && input[r] == input[ip]
            && input[r + 1] == input[ip + 1];
        if matched {
            let off = ip - r - 1;
            let mut len = 2usize;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            if op + 3 + 1 >= out_end && op - usize::from(lit == 0) + 3 + 1 >= out_end {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1); // stop run
            op -= usize::from(lit == 0); // undo run if length is zero
                                         // liblzf unrolls 16 compares when maxlen > 16, then goes on
                                         // with the bounded loop; the unrolled part may run past maxlen
                                         // by up to two bytes near the end of the input, and so do we.
            let mut done = false;
            if maxlen > 16 {
                for _ in 0..16 {
                    len += 1;
                    if input[r + len] != input[ip + len] {
                        done = true;
                        break;
                    }
                }
            }
            if !done {
                loop {
                    len += 1;
                    if !(len < maxlen && input[r + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2; // octets - 1
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 1;
            lit = 0;
            op += 1; // start run
            ip += len + 1;
            if ip >= in_len - 2 {
                break;
            }
            // VERY_FAST: rehash the last two positions of the match.
            ip -= 2;
            hval = frst(ip);
            hval = (hval << 8) | u32::from(input[ip + 2]);
            htab.set(idx(hval), ip);
            ip += 1;
            hval = (hval << 8) | u32::from(input[ip + 2]);
            htab.set(idx(hval), ip);
            ip += 1;
        } else {
            if op >= out_end {
                return None;
            }
            lit += 1;
            out[op] = input[ip];
            op += 1;
            ip += 1;
            if lit == MAX_LIT {
                out[op - lit - 1] = (lit - 1) as u8;
                lit = 0;
                op += 1;
            }
        }
    }
    if op + 3 > out_end {
        return None;
    }
    while ip < in_len {
        lit += 1;
        out[op] = input[ip];
        op += 1;
        ip += 1;
        if lit == MAX_LIT {
            out[op - lit - 1] = (lit - 1) as u8;
            lit = 0;
            op += 1;
        }
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1); // end run
    op -= usize::from(lit == 0);
    if op > out_end {
        return None;
    }
    out.truncate(op);
    Some(out)
}

/// Decompresses `input` that must expand to exactly `out_len` bytes.
pub fn decompress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    decompress_into(input, out_len, &mut out).then_some(out)
}

/// As [`decompress`], into `out` (cleared first, its allocation reused);
/// false when `input` is corrupt or does not expand to exactly `out_len`
/// bytes (`out` then holds a partial result).
pub fn decompress_into(input: &[u8], out_len: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    out.reserve(out_len);
    decode(input, out_len, out).is_some()
}

fn decode(input: &[u8], out_len: usize, out: &mut Vec<u8>) -> Option<()> {
    let mut ip = 0usize;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            // Literal run of ctrl + 1 bytes.
            let n = ctrl + 1;
            if out.len() + n > out_len {
                return None;
            }
            let lit = input.get(ip..ip + n)?;
            out.extend_from_slice(lit);
            ip += n;
        } else {
            // Back reference.
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip)?);
                ip += 1;
            }
            let lo = usize::from(*input.get(ip)?);
            ip += 1;
            let back = ((ctrl & 0x1f) << 8) + lo + 1;
            let len = len + 2;
            if out.len() + len > out_len || back > out.len() {
                return None;
            }
            let start = out.len() - back;
            // Overlapping copies repeat the pattern: byte by byte.
            for i in 0..len {
                let b = out[start + i];
                out.push(b);
            }
        }
    }
    (out.len() == out_len).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut rng = 0x12345678u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for n in [1usize, 2, 3, 4, 21, 100, 1000, 70_000] {
            for alphabet in [1u64, 2, 4, 26, 256] {
                let data: Vec<u8> = (0..n)
                    .map(|_| ((next() % alphabet) as u8).wrapping_add(b'a'))
                    .collect();
                if let Some(c) = compress(&data, n + 64) {
                    assert_eq!(
                        decompress(&c, n).as_deref(),
                        Some(&data[..]),
                        "n={n} a={alphabet}"
                    );
                }
            }
        }
        let data = vec![b'a'; 100];
        let c = compress(&data, 96).unwrap();
        assert!(c.len() < 10, "{}", c.len());
        assert!(compress(b"abcdefghijklmnopqrstuvwxyz", 22).is_none());
    }

    #[test]
    fn corrupt_input_is_rejected() {
        assert!(decompress(&[0x20, 0x00], 10).is_none()); // back ref before start
        assert!(decompress(&[0x05, b'a'], 6).is_none()); // literal truncated
        assert!(decompress(&[0x00, b'a', 0xE0], 20).is_none()); // long ref truncated
        assert!(decompress(&[0x00, b'a', 0x20, 0x00], 2).is_none()); // too long
        assert!(decompress(&[0x00, b'a'], 2).is_none()); // too short
        assert_eq!(decompress(&[0x00, b'a', 0x20, 0x00], 4).unwrap(), b"aaaa");
    }
}
