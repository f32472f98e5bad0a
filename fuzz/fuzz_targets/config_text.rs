//! `commands::fuzzing::config_text`: see that function and fuzz/README.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    commands::fuzzing::config_text(data);
});
