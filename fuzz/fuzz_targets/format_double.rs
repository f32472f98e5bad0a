//! `resp::format_double` on every f64 bit pattern: never panics; finite
//! values come out as C's `printf("%.17g")` (the glibc this links against,
//! which is what Redis's `addReplyDouble` calls) and parse back to the same
//! value, sign of zero included (17 significant digits always round-trip).
//! Infinities are Redis's `inf` / `-inf`, NaN is `nan`.
#![no_main]

use libfuzzer_sys::fuzz_target;

extern "C" {
    fn snprintf(buf: *mut u8, size: usize, fmt: *const std::ffi::c_char, ...) -> i32;
}

fn printf_g17(d: f64) -> String {
    // "%.17g" never exceeds 24 bytes ("-1.2345678901234567e-308").
    let mut buf = [0u8; 64];
    // SAFETY: the format is NUL-terminated, takes exactly one double, and
    // snprintf writes at most `buf.len()` bytes including the NUL.
    let n = unsafe { snprintf(buf.as_mut_ptr(), buf.len(), c"%.17g".as_ptr(), d) };
    assert!(n > 0 && (n as usize) < buf.len());
    String::from_utf8(buf[..n as usize].to_vec()).unwrap()
}

fuzz_target!(|bits: u64| {
    let d = f64::from_bits(bits);
    let s = resp::format_double(d);
    if d.is_nan() {
        assert_eq!(s, "nan");
        return;
    }
    if d.is_infinite() {
        assert_eq!(s, if d > 0.0 { "inf" } else { "-inf" });
        return;
    }
    let back: f64 = s.parse().unwrap_or_else(|e| panic!("{d:e} -> {s:?}: {e}"));
    assert_eq!(back.to_bits(), d.to_bits(), "{d:e} -> {s:?} -> {back:e}");
    assert_eq!(s, printf_g17(d), "{d:e} (bits {bits:#018x})");
});
