//! `commands::fuzzing::acl_rules`: see that function and fuzz/README.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    commands::fuzzing::acl_rules(data);
});
