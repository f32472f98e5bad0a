use super::*;
use crate::types::{Hash, List, ZSet};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn lim() -> EncLimits {
    EncLimits::default()
}

fn s(v: &str) -> Value {
    Value::Str(Str::from_bytes(v.as_bytes()))
}

fn list(items: &[&[u8]]) -> Value {
    let mut l = List::new(&lim());
    for i in items {
        l.push_back(i);
    }
    Value::List(l)
}

fn hash(pairs: &[(&[u8], &[u8])]) -> Value {
    let mut h = Hash::new();
    for (f, v) in pairs {
        h.set(f, v, &lim());
    }
    Value::Hash(h)
}

fn zset(pairs: &[(&[u8], f64)]) -> Value {
    let mut z = ZSet::default();
    for (m, sc) in pairs {
        z.insert(m, *sc, &lim());
    }
    Value::ZSet(Box::new(z))
}

fn set(members: &[&[u8]]) -> Value {
    let mut st = Set::create(members[0], members.len(), &lim());
    for m in members {
        st.add(m, &lim());
    }
    Value::Set(Box::new(st))
}

/// A value's contents in a canonical form (order-insensitive where the
/// type is), to compare values whatever their encoding or internal order.
#[derive(Debug, PartialEq)]
pub(crate) enum Canon {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    ZSet(Vec<(Vec<u8>, u64)>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    Stream(String),
}

pub(crate) fn canon(v: &Value) -> Canon {
    match v {
        Value::Str(s) => Canon::Str(s.as_bytes().into_owned()),
        Value::List(l) => Canon::List(l.to_vecs()),
        Value::Set(st) => {
            let mut m: Vec<Vec<u8>> = st
                .iter()
                .map(|m| crate::types::set::with_bytes(m, <[u8]>::to_vec))
                .collect();
            m.sort();
            Canon::Set(m)
        }
        Value::ZSet(z) => Canon::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s.to_bits())).collect()),
        Value::Hash(h) => {
            let mut p: Vec<_> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            p.sort();
            Canon::Hash(p)
        }
        Value::Stream(s) => Canon::Stream(format!("{s:?}")),
    }
}

fn round_trip(v: &Value) -> Value {
    let p = dump_payload(v);
    let back = restore_payload(&p, lim()).unwrap_or_else(|e| panic!("{e}: {}", hex(&p)));
    assert_eq!(canon(&back), canon(v));
    back
}

#[test]
fn crc64_check_values() {
    assert_eq!(crc64(0, b"123456789"), 0xe9c6d914c4b8d9ca);
    let a = b"hello ";
    let b = b"world, this is incremental";
    let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
    assert_eq!(crc64(crc64(0, a), b), crc64(0, &whole));
    assert_eq!(crc64(0, b""), 0);
}

#[test]
fn length_encodings() {
    for (n, want) in [
        (0u64, "00"),
        (63, "3f"),
        (64, "4040"),
        (16383, "7fff"),
        (16384, "8000004000"),
        (u64::from(u32::MAX), "80ffffffff"),
        (1 << 32, "810000000100000000"),
    ] {
        let mut o = Vec::new();
        write_len(&mut o, n);
        assert_eq!(hex(&o), want);
        let mut src = read::Src::new(&o[..]);
        assert_eq!(src.len().unwrap(), n);
    }
}

/// DUMP payloads Redis 7.0.15 produced for the same values (captured with
/// `DUMP` on a fresh `redis-server`): ours must be identical.
#[test]
fn dump_matches_redis_7_0_bytes() {
    let cases: Vec<(Value, &str)> = vec![
        (s("hello"), "000568656c6c6f0a006372df766534200a"),
        (s("12345"), "00c139300a009d94ea2793fc08b9"),
        (s("-70000"), "00c290eefeff0a002875de7b13eb2800"),
        (s("9999999999"), "000a393939393939393939390a00d26ac299df53efd2"),
        (s(&"a".repeat(45)), "00c3092d016161e020000161610a00b825a6f9a5128ed9"),
        (
            s("abcabcabcabcabcabcabcabcabcabcabcxyzxyzxyzxyzabcabc"),
            "00c314330361626361e014020278797ae0000240290162630a00d8c0f4ddd591ca83",
        ),
        (
            list(&[b"a", b"1", b"hello", b"300", b"-5"]),
            "1201021919000000050081610201018568656c6c6f06c12c02dffb02ff0a003da2172c0565d5a6",
        ),
        (
            hash(&[(b"f", b"v"), (b"n", b"10"), (b"big", b"123456789012")]),
            "1021210000000600816602817602816e020a018362696704f4141a99be1c00000009ff0a007a1fbab6fdf938bc",
        ),
        (
            zset(&[(b"a", 1.0), (b"b", 2.5), (b"c", -3.0), (b"d", 1e20), (b"e", 0.1)]),
            "11c3333c133c0000000a00816302dffd0281650293302e3130e00500193114816102010181620283322e35048164028531652b323006ff0a003b39232585af5639",
        ),
        (
            set(&[b"1", b"2", b"3", b"-100000"]),
            "0b1804000000040000006079feff0100000002000000030000000a008b0f7802aa2a77a0",
        ),
    ];
    for (v, want) in cases {
        assert_eq!(hex(&dump_payload(&v)), want, "{v:?}");
        let back = restore_payload(&unhex(want), lim()).unwrap();
        assert_eq!(canon(&back), canon(&v));
        assert_eq!(back.encoding(), v.encoding());
    }
}

#[test]
fn round_trip_every_type_and_encoding() {
    // Strings: ints, negative, 32/64-bit, non-canonical, embstr, raw,
    // compressible, incompressible, huge.
    for v in [
        "0",
        "-1",
        "127",
        "-128",
        "128",
        "32767",
        "-32769",
        "2147483647",
        "2147483648",
        "-9223372036854775808",
        "007",
        "-0",
        "+1",
        "",
        "hello",
    ] {
        round_trip(&s(v));
    }
    round_trip(&s(&"x".repeat(45)));
    let noise: String = (0..3000u32)
        .map(|i| char::from(b'!' + (i.wrapping_mul(2654435761) >> 27) as u8))
        .collect();
    round_trip(&s(&noise));
    round_trip(&Value::Str(Str::Raw(vec![7u8; 5_000_000].into())));
    // Lists: small, many nodes, big elements.
    round_trip(&list(&[b"x"]));
    let many: Vec<Vec<u8>> = (0..20_000)
        .map(|i| format!("element-{i}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = many.iter().map(|v| &v[..]).collect();
    round_trip(&list(&refs));
    round_trip(&list(&[&vec![b'q'; 100_000][..], b"1", b"-1"]));
    // Sets: intset (16/32/64-bit), listpack, hashtable.
    let b = round_trip(&set(&[b"1", b"-9223372036854775808"]));
    assert_eq!(b.encoding(), "intset");
    let b = round_trip(&set(&[b"a", b"b", b"1"]));
    assert_eq!(b.encoding(), "listpack");
    let big: Vec<Vec<u8>> = (0..1000).map(|i| format!("m{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = big.iter().map(|v| &v[..]).collect();
    assert_eq!(round_trip(&set(&refs)).encoding(), "hashtable");
    let ints: Vec<Vec<u8>> = (0..600).map(|i| format!("{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = ints.iter().map(|v| &v[..]).collect();
    assert_eq!(round_trip(&set(&refs)).encoding(), "hashtable");
    // Zsets: listpack with odd scores, skiplist.
    let b = round_trip(&zset(&[
        (b"a", f64::INFINITY),
        (b"b", f64::NEG_INFINITY),
        (b"c", -0.0),
        (b"d", 1.0 / 3.0),
        (b"e", 5e-324),
        (b"f", 1.7976931348623157e308),
        (b"12", 12.0),
    ]));
    assert_eq!(b.encoding(), "listpack");
    let pairs: Vec<(Vec<u8>, f64)> = (0..300)
        .map(|i| (format!("m{i}").into_bytes(), f64::from(i) / 7.0))
        .collect();
    let refs: Vec<(&[u8], f64)> = pairs.iter().map(|(m, s)| (&m[..], *s)).collect();
    assert_eq!(round_trip(&zset(&refs)).encoding(), "skiplist");
    assert_eq!(
        round_trip(&zset(&[(&[b'z'; 65][..], 1.0)])).encoding(),
        "skiplist"
    );
    // Hashes: listpack, hashtable by count and by value length.
    assert_eq!(
        round_trip(&hash(&[(b"a", b"1"), (b"", b""), (b"-5", b"x")])).encoding(),
        "listpack"
    );
    // 513 fields: past the default limit (512).
    let fields: Vec<Vec<u8>> = (0..513).map(|i| format!("f{i}").into_bytes()).collect();
    let pairs: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (&f[..], &f[..])).collect();
    assert_eq!(round_trip(&hash(&pairs)).encoding(), "hashtable");
    assert_eq!(
        round_trip(&hash(&[(b"a", &[b'v'; 100][..])])).encoding(),
        "hashtable"
    );
}

#[test]
fn load_picks_encodings_from_limits() {
    let small = EncLimits {
        hash_max_listpack_entries: 1,
        zset_max_listpack_entries: 1,
        set_max_intset_entries: 1,
        ..lim()
    };
    let h = restore_payload(&dump_payload(&hash(&[(b"a", b"1"), (b"b", b"2")])), small).unwrap();
    assert_eq!(h.encoding(), "hashtable");
    let z = restore_payload(&dump_payload(&zset(&[(b"a", 1.0), (b"b", 2.0)])), small).unwrap();
    assert_eq!(z.encoding(), "skiplist");
    let st = restore_payload(&dump_payload(&set(&[b"1", b"2"])), small).unwrap();
    assert_eq!(st.encoding(), "hashtable");
}

#[test]
fn restore_checks_version_and_crc() {
    let mut p = dump_payload(&s("hello"));
    assert!(restore_payload(&p[..9], lim()).is_err());
    let n = p.len();
    p[n - 1] ^= 1;
    assert!(restore_payload(&p, lim())
        .unwrap_err()
        .reason
        .contains("checksum"));
    // Version 11 is refused by DUMP payload rules (Redis 7.0's RDB_VERSION).
    let mut p = Vec::new();
    write_value(&mut p, &s("x"), true);
    p.extend_from_slice(&11u16.to_le_bytes());
    let c = crc64(0, &p);
    p.extend_from_slice(&c.to_le_bytes());
    assert!(restore_payload(&p, lim())
        .unwrap_err()
        .reason
        .contains("version"));
}

/// Builds a payload with a valid footer around `body`.
fn with_footer(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let c = crc64(0, &p);
    p.extend_from_slice(&c.to_le_bytes());
    p
}

#[test]
fn legacy_encodings_hand_written() {
    // Type 1 plain list: 2 elements, "a" and INT8 5.
    let v = restore_payload(&with_footer(&[T_LIST, 2, 1, b'a', 0xC0, 5]), lim()).unwrap();
    assert_eq!(canon(&v), Canon::List(vec![b"a".to_vec(), b"5".to_vec()]));
    // Type 3 zset with ASCII scores: "m" 1.5, "n" +inf (254).
    let v = restore_payload(
        &with_footer(&[T_ZSET, 2, 1, b'm', 3, b'1', b'.', b'5', 1, b'n', 254]),
        lim(),
    )
    .unwrap();
    assert_eq!(
        canon(&v),
        Canon::ZSet(vec![
            (b"m".to_vec(), 1.5f64.to_bits()),
            (b"n".to_vec(), f64::INFINITY.to_bits())
        ])
    );
    // Type 9 zipmap hash: f -> vv (one free byte), g -> "".
    let zm = [2, 1, b'f', 2, 1, b'v', b'v', 0, 1, b'g', 0, 0, 255];
    let mut body = vec![T_HASH_ZIPMAP, zm.len() as u8];
    body.extend_from_slice(&zm);
    let v = restore_payload(&with_footer(&body), lim()).unwrap();
    assert_eq!(
        canon(&v),
        Canon::Hash(vec![
            (b"f".to_vec(), b"vv".to_vec()),
            (b"g".to_vec(), vec![])
        ])
    );
    assert_eq!(v.encoding(), "listpack");
    // A ziplist ["k", 7, "j", "x"]: as list (10), hash (13), zset (12),
    // and as the one node of a quicklist v1 (14).
    let zl = ziplist(&[
        &[0x00, 0x01, b'k'],
        &[0x03, 0xF8],
        &[0x02, 0x01, b'j'],
        &[0x03, 0x01, b'x'],
    ]);
    let mut body = vec![T_LIST_ZIPLIST, zl.len() as u8];
    body.extend_from_slice(&zl);
    let v = restore_payload(&with_footer(&body), lim()).unwrap();
    assert_eq!(
        canon(&v),
        Canon::List(vec![
            b"k".to_vec(),
            b"7".to_vec(),
            b"j".to_vec(),
            b"x".to_vec()
        ])
    );
    body[0] = T_HASH_ZIPLIST;
    let v = restore_payload(&with_footer(&body), lim()).unwrap();
    assert_eq!(
        canon(&v),
        Canon::Hash(vec![
            (b"j".to_vec(), b"x".to_vec()),
            (b"k".to_vec(), b"7".to_vec())
        ])
    );
    body[0] = T_ZSET_ZIPLIST; // "x" is not a score
    assert!(restore_payload(&with_footer(&body), lim()).is_err());
    let zl2 = ziplist(&[
        &[0x00, 0x01, b'k'],
        &[0x03, 0xF8],
        &[0x02, 0x01, b'j'],
        &[0x03, 0x03, b'2', b'.', b'5'],
    ]);
    let mut body = vec![T_ZSET_ZIPLIST, zl2.len() as u8];
    body.extend_from_slice(&zl2);
    let v = restore_payload(&with_footer(&body), lim()).unwrap();
    assert_eq!(
        canon(&v),
        Canon::ZSet(vec![
            (b"j".to_vec(), 2.5f64.to_bits()),
            (b"k".to_vec(), 7f64.to_bits())
        ])
    );
    let mut body = vec![T_LIST_QUICKLIST, 1, zl.len() as u8];
    body.extend_from_slice(&zl);
    let v = restore_payload(&with_footer(&body), lim()).unwrap();
    assert_eq!(canon(&v).clone_list_len(), 4);
    // Type 20 set listpack (Redis 7.2).
    let mut w = pack::LpWriter::new();
    w.push(b"a");
    w.push(b"7");
    let lp = w.finish();
    let mut body = vec![T_SET_LISTPACK, lp.len() as u8];
    body.extend_from_slice(&lp);
    let v = restore_payload(&with_footer(&body), lim()).unwrap();
    assert_eq!(canon(&v), Canon::Set(vec![b"7".to_vec(), b"a".to_vec()]));
    // Quicklist 2 with a PLAIN node.
    let v = restore_payload(
        &with_footer(&[T_LIST_QUICKLIST_2, 1, 1, 3, b'b', b'i', b'g']),
        lim(),
    )
    .unwrap();
    assert_eq!(canon(&v), Canon::List(vec![b"big".to_vec()]));
}

impl Canon {
    fn clone_list_len(&self) -> usize {
        match self {
            Canon::List(l) => l.len(),
            _ => usize::MAX,
        }
    }
}

/// A ziplist from raw entries (each: prevlen byte(s), encoding, data).
fn ziplist(entries: &[&[u8]]) -> Vec<u8> {
    let mut z = vec![0u8; 10];
    let mut tail = 10;
    for e in entries {
        tail = z.len();
        z.extend_from_slice(e);
    }
    z.push(0xFF);
    let n = z.len() as u32;
    z[0..4].copy_from_slice(&n.to_le_bytes());
    z[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
    z[8..10].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    z
}

#[test]
fn corrupt_payloads_are_errors() {
    // Duplicates.
    assert!(restore_payload(&with_footer(&[T_SET, 2, 1, b'a', 1, b'a']), lim()).is_err());
    assert!(restore_payload(&with_footer(&[T_HASH, 2, 1, b'a', 0, 1, b'a', 0]), lim()).is_err());
    let mut zs = vec![T_ZSET_2, 2, 1, b'a'];
    zs.extend_from_slice(&1f64.to_le_bytes());
    zs.extend_from_slice(&[1, b'a']);
    zs.extend_from_slice(&2f64.to_le_bytes());
    assert!(restore_payload(&with_footer(&zs), lim()).is_err());
    // NaN score.
    let mut zs = vec![T_ZSET_2, 1, 1, b'a'];
    zs.extend_from_slice(&f64::NAN.to_le_bytes());
    assert!(restore_payload(&with_footer(&zs), lim()).is_err());
    // Streams, modules, unknown types.
    for t in [
        T_STREAM_LISTPACKS,
        T_STREAM_LISTPACKS_2,
        T_STREAM_LISTPACKS_3,
        T_MODULE_2,
        8,
        99,
    ] {
        let e = restore_payload(&with_footer(&[t, 0]), lim()).unwrap_err();
        assert!(!e.to_string().is_empty());
    }
    assert!(restore_payload(&with_footer(&[T_STREAM_LISTPACKS]), lim())
        .unwrap_err()
        .reason
        .contains("stream"));
    // Huge lengths with little data: an error, not an allocation.
    assert!(restore_payload(
        &with_footer(&[T_STRING, 0x81, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        lim()
    )
    .is_err());
    assert!(restore_payload(
        &with_footer(&[T_LIST, 0x81, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        lim()
    )
    .is_err());
    assert!(restore_payload(
        &with_footer(&[T_STRING, 0xC3, 1, 0x81, 0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0]),
        lim()
    )
    .is_err());
    // Empty collections.
    assert!(restore_payload(&with_footer(&[T_SET, 0]), lim()).is_err());
}

fn sample_values() -> Vec<Value> {
    let many: Vec<Vec<u8>> = (0..300).map(|i| format!("e{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = many.iter().map(|v| &v[..]).collect();
    let pairs: Vec<(&[u8], &[u8])> = refs.iter().map(|f| (*f, *f)).collect();
    let zp: Vec<(&[u8], f64)> = refs
        .iter()
        .enumerate()
        .map(|(i, m)| (*m, i as f64 * 0.5))
        .collect();
    vec![
        s("hello"),
        s("12345"),
        s(&"abc".repeat(40)),
        list(&[b"a", b"1", b"hello"]),
        list(&refs),
        set(&[b"1", b"2", b"3"]),
        set(&[b"x", b"y"]),
        set(&refs),
        zset(&[(b"a", 1.0), (b"b", 2.5)]),
        zset(&zp),
        hash(&[(b"f", b"v"), (b"n", b"10")]),
        hash(&pairs),
    ]
}

/// Every truncation and many bit flips of valid payloads and files: an
/// error or a value, never a panic.
#[test]
fn truncated_and_bit_flipped_input_never_panics() {
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for v in sample_values() {
        let mut body = Vec::new();
        write_value(&mut body, &v, true);
        for cut in 0..body.len().min(400) {
            let _ = restore_payload(&with_footer(&body[..cut]), lim());
        }
        for _ in 0..100 {
            let mut b = body.clone();
            let flips = 1 + next() % 3;
            for _ in 0..flips {
                let i = (next() as usize) % b.len();
                b[i] ^= 1 << (next() % 8);
            }
            let _ = restore_payload(&with_footer(&b), lim());
        }
    }
    // Whole files, read with the checksum off (0) so flips reach the
    // decoders.
    let file = sample_file(false);
    for cut in (0..file.len()).step_by(file.len() / 300 + 1) {
        let _ = read_all(&file[..cut]);
    }
    for _ in 0..500 {
        let mut b = file.clone();
        let i = 9 + (next() as usize) % (b.len() - 17);
        b[i] ^= 1 << (next() % 8);
        let _ = read_all(&b);
    }
}

fn sample_file(checksum: bool) -> Vec<u8> {
    let mut f = Vec::new();
    write_header(&mut f, 1_700_000_000, 1 << 40, false);
    write_select_db(&mut f, 0);
    let vals = sample_values();
    write_resize_db(&mut f, vals.len() as u64, 1);
    for (i, v) in vals.into_iter().enumerate() {
        let at = if i == 0 { 4_000_000_000_000 } else { 0 };
        write_entry(&mut f, format!("key{i}").as_bytes(), (&v).into(), at, true);
    }
    write_select_db(&mut f, 3);
    write_resize_db(&mut f, 1, 0);
    write_entry_ext(
        &mut f,
        b"k3",
        (&s("in db 3")).into(),
        0,
        true,
        Some(77),
        Some(9),
    );
    write_eof(&mut f);
    let c = if checksum { crc64(0, &f) } else { 0 };
    f.extend_from_slice(&c.to_le_bytes());
    f
}

fn read_all(b: &[u8]) -> Result<Vec<Loaded>, RdbError> {
    let mut r = Reader::new(b, lim())?;
    let mut out = Vec::new();
    while let Some(l) = r.next()? {
        out.push(l);
    }
    Ok(out)
}

#[test]
fn file_round_trip() {
    let f = sample_file(true);
    assert_eq!(&f[..9], b"REDIS0010");
    let got = read_all(&f).unwrap();
    let vals = sample_values();
    assert_eq!(got.len(), vals.len() + 1);
    for (i, v) in vals.iter().enumerate() {
        assert_eq!(got[i].key, format!("key{i}").into_bytes());
        assert_eq!(got[i].db, 0);
        assert_eq!(canon(&got[i].value), canon(v));
    }
    assert_eq!(got[0].expire_at_ms, 4_000_000_000_000);
    assert_eq!(got[1].expire_at_ms, 0);
    let last = &got[vals.len()];
    assert_eq!(
        (last.db, &last.key[..], last.idle_s, last.freq),
        (3, &b"k3"[..], Some(77), Some(9))
    );
    // A wrong checksum is refused; zero means "not computed".
    let mut bad = f.clone();
    let n = bad.len();
    bad[n - 1] ^= 0x10;
    assert!(read_all(&bad).unwrap_err().reason.contains("checksum"));
    assert!(read_all(&sample_file(false)).is_ok());
    // Headers.
    assert!(Reader::new(&b"REDIS0012"[..], lim()).is_err());
    assert!(Reader::new(&b"RODIS0010"[..], lim()).is_err());
    assert!(Reader::new(&b"REDIS00"[..], lim()).is_err());
    assert!(Reader::new(&b"REDIS0011\xff"[..], lim()).is_ok());
    // Error messages carry an offset.
    let e = read_all(&f[..f.len() - 3]).unwrap_err();
    assert!(e.to_string().contains("at byte"), "{e}");
}

/// A file Redis 7.0.15 wrote (`SAVE` after creating one key of each type
/// and encoding): see tests/fixtures/README.md.
#[test]
fn loads_redis_written_file() {
    let f = include_bytes!("../../../../tests/fixtures/redis-7.0.15.rdb");
    let got = read_all(f).unwrap();
    assert!(got.len() >= 10, "{}", got.len());
    let by_key = |k: &str| {
        got.iter()
            .find(|l| l.key == k.as_bytes())
            .unwrap_or_else(|| panic!("{k}"))
    };
    assert_eq!(canon(&by_key("str").value), Canon::Str(b"hello".to_vec()));
    assert_eq!(by_key("int").value.encoding(), "int");
    // Written as a hashtable (by a Redis with a lower limit); 200 fields
    // load as a listpack under the default limit of 512, as Redis 7.0.15
    // itself loads this file.
    assert_eq!(by_key("hash_big").value.encoding(), "listpack");
    assert_eq!(by_key("zset_big").value.encoding(), "skiplist");
    assert_eq!(by_key("set_int").value.encoding(), "intset");
    assert!(by_key("ttl").expire_at_ms > 0);
    assert_eq!(by_key("list_big").value.elements(), 10_000);
    assert_eq!(by_key("db1").db, 1);
}

/// A list under `list-compress-depth 1` saved with `rdbcompression no`:
/// Redis still writes its compressed inner nodes as LZF blobs. The bytes
/// are Redis 7.0.15's DUMP of the same list (fill 2, depth 1, built by
/// RPUSH) without its version and CRC footer.
#[test]
fn compressed_inner_nodes_saved_as_lzf_blobs() {
    let enc = EncLimits {
        list_max_listpack_size: 2,
        list_compress_depth: 1,
        ..EncLimits::default()
    };
    let mut l = List::new(&enc);
    for i in 1..=6 {
        l.push_back(format!("{}{i}", "a".repeat(38)).as_bytes());
    }
    assert_eq!(l.compressed_nodes(), 1);
    let v = Value::List(l);
    let mut out = Vec::new();
    write_value(&mut out, &v, false);
    let want = concat!(
        "1203024059590000000200a7616161616161616161616161616161616161616161616161",
        "61616161616161616161616161613128a761616161616161616161616161616161616161",
        "616161616161616161616161616161616161613228ff02c316405907590000000200a761",
        "e01c00013328e01e28023428ff024059590000000200a761616161616161616161616161",
        "616161616161616161616161616161616161616161616161613528a76161616161616161",
        "6161616161616161616161616161616161616161616161616161616161613628ff",
    );
    assert_eq!(hex(&out), want);
    let back = restore_payload(&dump_payload(&v), enc).unwrap();
    assert_eq!(canon(&back), canon(&v));
}

/// A DUMP from Redis 7.0.15: XADD s 1-1 a 1 b 2, XADD s 1-2 a 3 b 4,
/// XADD s 2-0 c 3, XGROUP CREATE s g 0, XREADGROUP GROUP g alice COUNT 1
/// STREAMS s >. Read, and written back byte for byte.
#[test]
fn stream_dump_from_redis_round_trips() {
    let p: &[u8] = b"\x13\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01==\x00\x00\x00\x19\x00\x03\x01\x00\x01\x02\x01\x81a\x02\x81b\x02\x00\x01\x02\x01\x00\x01\x00\x01\x01\x01\x02\x01\x05\x01\x02\x01\x00\x01\x01\x01\x03\x01\x04\x01\x05\x01\x00\x01\x01\x01\xdf\xff\x02\x01\x01\x81c\x02\x03\x01\x06\x01\xff\x03\x02\x00\x01\x01\x00\x00\x03\x01\x01g\x01\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01e\xb1\"\x1c\xa2\x01\x00\x00\x01\x01\x05alicee\xb1\"\x1c\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\n\x00\x1f\xcc\xaaV\x08*Ey";
    let v = restore_payload(p, lim()).unwrap();
    let Value::Stream(s) = &v else {
        panic!("not a stream")
    };
    assert_eq!(s.len(), 3);
    assert_eq!(s.groups.len(), 1);
    assert_eq!(dump_payload(&v), p);
    // Every truncation fails cleanly.
    for cut in 0..p.len() - 10 {
        let mut q = p[..cut].to_vec();
        q.extend_from_slice(&p[p.len() - 10..]);
        let _ = restore_payload(&q, lim());
    }
}
