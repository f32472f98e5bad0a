use super::*;
use crate::db::malloc_chunk;
use crate::types::{EncLimits, Hash};

fn meta() -> Meta {
    let mut m = Meta::new(5_000);
    m.lfu_counter = 9;
    m.set_ttl_flag(true);
    m.set_stamp(3);
    m
}

fn strings() -> Vec<Str> {
    let mut grown = Str::from_bytes(b"ab");
    grown.make_raw().push(b'c');
    let mut v = vec![Str::from_bytes(b"-42"), grown];
    for n in [0, 1, 22, 23, 24, 30, 31, 44, 45, 100, 1000] {
        let b: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
        v.push(Str::from_bytes(&b));
    }
    v
}

fn keys() -> Vec<Vec<u8>> {
    [0, 1, 11, 14, 15, 16, 62, 63, 64, 300]
        .iter()
        .map(|&n| (0..n).map(|i| b'k' + (i % 7) as u8).collect())
        .collect()
}

#[test]
fn a_string_of_100_bytes_and_its_key_take_one_144_byte_chunk() {
    let n = KeyNode::new(
        b"key:1234567",
        OwnedEntry::new(Value::Str(Str::from_bytes(&[b'0'; 100])), 0),
    );
    assert_eq!(n.size(), 136, "17 + 11 + 4 + 100, rounded to 8");
    assert_eq!(malloc_chunk(n.size()), 144);
    assert_eq!(n.entry().value().encoding(), "raw");
    assert_eq!(n.entry().value().heap_bytes(), 0);
}

#[test]
fn other_values_keep_the_64_byte_chunk_for_keys_up_to_15_bytes() {
    for k in [&b"key:1"[..], b"key:12345678901"] {
        let n = KeyNode::new(
            k,
            OwnedEntry::new(Value::Str(Str::from_bytes(b"0123456789abcdef")), 0),
        );
        assert!(n.size() <= 56, "{k:?}");
        assert_eq!(malloc_chunk(n.size()), 64);
    }
    let n = KeyNode::new(&[b'k'; 16], OwnedEntry::new(Value::Str(Str::Int(7)), 0));
    assert_eq!(
        malloc_chunk(n.size()),
        80,
        "a 16-byte key: one chunk, no key allocation"
    );
}

#[test]
fn every_string_encoding_and_key_length_round_trips() {
    for k in keys() {
        for s in strings() {
            let mut e = OwnedEntry::new(Value::Str(s.clone()), 0);
            e.meta = meta();
            let n = KeyNode::new(&k, e);
            assert_eq!(n.key(), &k[..]);
            assert_eq!(ds::dict::ChainNode::key(&n), &k[..]);
            assert_eq!(n.entry().key(), &k[..]);
            assert_eq!(n.entry().meta, meta());
            assert_eq!(
                n.entry().value(),
                ValueRef::Str(StrRef::Str(&s)),
                "{k:?} {s:?}"
            );
            assert_eq!(n.entry().value().encoding(), s.encoding());
            assert!(ds::dict::ChainNode::next(&n).is_none());
            let back = n.into_owned();
            assert_eq!(back.value, Value::Str(s.clone()));
            assert_eq!(back.meta, meta());
        }
    }
}

#[test]
fn value_mut_converts_a_stored_string_in_place_keeping_key_contents_and_meta() {
    for k in keys() {
        for s in strings() {
            let mut n = KeyNode::new(&k, OwnedEntry::new(Value::Str(s.clone()), 7_000));
            let size = n.size();
            {
                let e = n.entry_mut();
                e.lfu_counter = 200;
                let Value::Str(v) = e.value_mut() else {
                    panic!("a string")
                };
                assert_eq!(v.view(), s.view());
                v.make_raw().extend_from_slice(b"xyz");
            }
            assert_eq!(n.size(), size, "converting keeps the node's size");
            assert_eq!(n.key(), &k[..]);
            assert_eq!(n.entry().lfu_counter, 200);
            let want = [s.as_bytes().into_owned(), b"xyz".to_vec()].concat();
            assert_eq!(n.entry().value().encoding(), "raw");
            let ValueRef::Str(got) = n.entry().value() else {
                panic!("a string")
            };
            assert_eq!(got.as_bytes(), &want[..]);
            // Twice: the second call finds a `Value` already.
            assert!(matches!(
                n.entry_mut().value_mut(),
                Value::Str(Str::Grow(_))
            ));
            if k.len() % 2 == 0 {
                drop(n);
            } else {
                assert_eq!(n.into_owned().value, Value::Str(Str::from_vec_raw(want)));
            }
        }
    }
}

#[test]
fn collections_are_stored_as_values() {
    let lim = EncLimits::default();
    let mut h = Hash::default();
    h.set(b"f", b"v", &lim);
    let mut n = KeyNode::new(b"h", OwnedEntry::new(Value::Hash(h.clone()), 0));
    assert_eq!(n.entry().value(), ValueRef::Hash(&h));
    if let Value::Hash(h2) = n.entry_mut().value_mut() {
        h2.set(b"g", b"w", &lim);
    }
    assert_eq!(n.entry().value().elements(), 2);
    let back = n.into_owned();
    assert_eq!(back.value.elements(), 2);
}

#[test]
fn the_link_is_the_first_word_and_chains_drop() {
    let mut a = KeyNode::new(
        b"a",
        OwnedEntry::new(Value::Str(Str::from_bytes(&[1; 50])), 0),
    );
    let b = KeyNode::new(b"b", OwnedEntry::new(Value::Str(Str::Int(1)), 0));
    *ds::dict::ChainNode::next_mut(&mut a) = Some(b);
    assert_eq!(
        ds::dict::ChainNode::next(&a).as_ref().map(|n| n.key()),
        Some(&b"b"[..])
    );
    drop(a);
}

#[test]
fn only_strings_up_to_bytes_max_are_stored_in_the_node() {
    for (n, in_node) in [(BYTES_MAX, true), (BYTES_MAX + 1, false)] {
        let s = Str::from_bytes(&vec![b'z'; n]);
        let a = KeyNode::new(b"k", OwnedEntry::new(Value::Str(s.clone()), 0));
        let b = KeyNode::new_str(b"k", Meta::new(0), &vec![b'z'; n]);
        for node in [&a, &b] {
            assert_eq!(node.entry().value().heap_bytes() == 0, in_node, "{n}");
            assert_eq!(node.entry().value(), ValueRef::Str(StrRef::Str(&s)));
        }
    }
}

#[test]
fn new_value_keeps_a_string_as_a_growable_value() {
    let e = OwnedEntry::new(Value::Str(Str::from_bytes(&[b'q'; 100])), 0);
    let n = KeyNode::new_value(b"k", e);
    assert!(matches!(
        n.entry().value(),
        ValueRef::Str(StrRef::Str(Str::Grow(_)))
    ));
    assert_eq!(n.entry().value().encoding(), "raw");
}
