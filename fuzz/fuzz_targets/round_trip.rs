//! Encode arbitrary arguments as a RESP multibulk request with the reply
//! encoder (`*N` then one `$len` bulk each, the shape every client sends),
//! follow it with arbitrary bytes (the next request), and parse: the parser
//! must consume exactly the encoding and return the same arguments. Short
//! encodings are also cut at every byte: each prefix must be `Incomplete`
//! with a need within `cut + 1 ..= encoded length`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use resp::{parse_request, Limits, Parsed, Reply};

const LIMITS: Limits = Limits {
    max_bulk_len: 512 * 1024 * 1024,
    auth_required: false,
};

/// Encodings up to this long are also parsed at every cut (quadratic).
const EVERY_CUT_MAX: usize = 512;

fuzz_target!(|input: (Vec<Vec<u8>>, Vec<u8>)| {
    let (items, next) = input;
    let mut reply = Reply::new(false);
    reply.array(items.len());
    for a in &items {
        reply.bulk(a);
    }
    let encoded_len = reply.len();
    reply.raw(&next);
    let mut wire = reply.into_bytes();

    let mut ranges = Vec::new();
    let p = parse_request(&mut wire, &LIMITS, &mut ranges);
    assert_eq!(p, Parsed::Complete(encoded_len));
    let got: Vec<&[u8]> = ranges.iter().map(|r| &wire[r.clone()]).collect();
    let want: Vec<&[u8]> = items.iter().map(|a| a.as_slice()).collect();
    assert_eq!(got, want);

    if encoded_len <= EVERY_CUT_MAX {
        for cut in 0..encoded_len {
            let mut prefix = wire[..cut].to_vec();
            match parse_request(&mut prefix, &LIMITS, &mut ranges) {
                Parsed::Incomplete(need) => assert!(
                    cut < need && need <= encoded_len,
                    "cut {cut}: need {need}, encoded {encoded_len}"
                ),
                other => panic!("cut {cut}: {other:?}"),
            }
        }
    }
});
