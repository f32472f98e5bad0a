//! Rough micro-benchmark: `Dict` against `std::collections::HashMap` (same
//! hasher) on `SmallBytes` keys. Prints numbers; asserts nothing about time.
//!
//! `cargo run -p ds --release --example dict_bench`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use ds::{Dict, SmallBytes};

const N: usize = 1_000_000;

fn main() {
    let keys: Vec<SmallBytes> = (0..N)
        .map(|i| SmallBytes::from(format!("key:{i:012}").as_str()))
        .collect();

    let start = Instant::now();
    let mut dict = Dict::new();
    for (i, k) in keys.iter().enumerate() {
        dict.insert(k.clone(), i);
    }
    report("Dict insert", start);
    let start = Instant::now();
    let mut hits = 0;
    for k in &keys {
        hits += usize::from(dict.contains_key(black_box(&k[..])));
    }
    report("Dict get (hit)", start);
    let start = Instant::now();
    for i in 0..N {
        let miss = format!("nope:{i:012}");
        hits += usize::from(dict.contains_key(black_box(miss.as_bytes())));
    }
    report("Dict get (miss, incl. format)", start);

    let start = Instant::now();
    let mut map: HashMap<SmallBytes, usize, foldhash::fast::RandomState> = HashMap::default();
    for (i, k) in keys.iter().enumerate() {
        map.insert(k.clone(), i);
    }
    report("HashMap insert", start);
    let start = Instant::now();
    for k in &keys {
        hits += usize::from(map.contains_key(black_box(&k[..])));
    }
    report("HashMap get (hit)", start);
    println!(
        "hits {hits}, dict {} buckets, ~{} MiB",
        dict.buckets(),
        dict.allocated_bytes() >> 20
    );
}

fn report(what: &str, start: Instant) {
    let ns = start.elapsed().as_nanos() as f64 / N as f64;
    println!("{what:32} {ns:7.1} ns/op");
}
