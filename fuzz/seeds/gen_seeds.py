#!/usr/bin/env python3
"""Writes the seed corpora of the RESTORE fuzz targets from a real Redis.

    redis-server --port 7424 --save '' --daemonize yes
    python3 fuzz/seeds/gen_seeds.py 7424

Each seed is what the target reads (see fuzz/README.md):
  restore_stream/  a DUMP payload of a stream without its 10-byte footer
                   (type byte + body); type 19 as Redis 7.0 writes it, and
                   the same streams rewritten as type 15 (5.0/6.x) and 21
                   (7.2) by this script, since 7.0 writes neither;
  restore_hll/     the bytes of a HyperLogLog string (GET key);
  bitgeo/          a selector byte, an op count byte, one op of each kind,
                   then a
                   string value (selector 0) or a zset payload without
                   footer (selector 1): GEOADD sets, listpack and skiplist.
Plain sockets, no client library.
"""
import os
import socket
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()[:-2]
        t, rest = line[:1], line[1:]
        if t in (b"+", b":"):
            return rest
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data
        if t == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError("bad reply %r" % line)


# --- RDB pieces, enough for the uncompressed stream payloads written here.
def read_len(b, p):
    t = b[p] >> 6
    if t == 0:
        return b[p] & 0x3F, p + 1
    if t == 1:
        return ((b[p] & 0x3F) << 8) | b[p + 1], p + 2
    if b[p] == 0x80:
        return struct.unpack(">I", b[p + 1:p + 5])[0], p + 5
    if b[p] == 0x81:
        return struct.unpack(">Q", b[p + 1:p + 9])[0], p + 9
    raise ValueError("encoded string in a stream payload (compression on?)")


def read_str(b, p):
    n, p = read_len(b, p)
    return b[p:p + n], p + n


def write_len(n):
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if n <= 0xFFFFFFFF:
        return b"\x80" + struct.pack(">I", n)
    return b"\x81" + struct.pack(">Q", n)


def convert_stream(body, to):
    """Rewrites a type-19 stream body (after the type byte) as type `to`."""
    b, p, out = body, 0, bytearray()

    def copy_len():
        nonlocal p
        n, q = read_len(b, p)
        out.extend(b[p:q])
        p = q
        return n

    def skip_len():
        nonlocal p
        _, p = read_len(b, p)

    def copy_str():
        nonlocal p
        _, q = read_str(b, p)
        out.extend(b[p:q])
        p = q

    def copy_raw(n):
        nonlocal p
        out.extend(b[p:p + n])
        p += n

    nodes = copy_len()
    for _ in range(nodes):
        copy_str()
        copy_str()
    copy_len()  # length
    copy_len()  # last id ms
    copy_len()  # last id seq
    if to == 15:
        for _ in range(5):  # first id, max deleted id, entries added
            skip_len()
    else:
        for _ in range(5):
            copy_len()
    groups = copy_len()
    for _ in range(groups):
        copy_str()
        copy_len()
        copy_len()
        if to == 15:
            skip_len()  # entries read
        else:
            copy_len()
        pel = copy_len()
        for _ in range(pel):
            copy_raw(16 + 8)
            copy_len()
        consumers = copy_len()
        for _ in range(consumers):
            copy_str()
            seen = b[p:p + 8]
            copy_raw(8)
            if to == 21:
                out.extend(seen)  # active time
            n = copy_len()
            copy_raw(16 * n)
    assert p == len(body), (p, len(body))
    return bytes(out)


def save(dirname, name, data):
    d = os.path.join(HERE, dirname)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def body_of(c, key):
    return c.cmd("DUMP", key)[:-10]


def streams(c):
    c.cmd("CONFIG", "SET", "rdbcompression", "no")
    c.cmd("CONFIG", "SET", "stream-node-max-entries", "4")
    # One node, one group, two consumers, pending entries.
    for i in range(3):
        c.cmd("XADD", "s1", "%d-1" % (i + 1), "f", "v%d" % i, "n", i)
    c.cmd("XGROUP", "CREATE", "s1", "g1", "0")
    c.cmd("XREADGROUP", "GROUP", "g1", "c1", "COUNT", "2", "STREAMS", "s1", ">")
    c.cmd("XREADGROUP", "GROUP", "g1", "c2", "STREAMS", "s1", ">")
    c.cmd("XACK", "s1", "g1", "2-1")
    # Several nodes, mixed fields, deletions, two groups, a trimmed head.
    for i in range(14):
        fields = ["f", "v%d" % i] if i % 3 else ["a", i, "b", "x" * (i % 5), "c", -i]
        c.cmd("XADD", "s2", "*", *fields)
    ids = [e[0] for e in c.cmd("XRANGE", "s2", "-", "+")]
    c.cmd("XDEL", "s2", ids[1], ids[5], ids[6])
    c.cmd("XTRIM", "s2", "MAXLEN", "10")
    c.cmd("XGROUP", "CREATE", "s2", "g1", "$")
    c.cmd("XGROUP", "CREATE", "s2", "g2", "0", "ENTRIESREAD", "2")
    c.cmd("XGROUP", "CREATECONSUMER", "s2", "g1", "idle")
    c.cmd("XREADGROUP", "GROUP", "g2", "c1", "COUNT", "5", "STREAMS", "s2", ">")
    c.cmd("XCLAIM", "s2", "g2", "c2", "0", ids[7])
    # Empty: a group and no entries; and one emptied by XDEL.
    c.cmd("XGROUP", "CREATE", "s3", "g1", "$", "MKSTREAM")
    c.cmd("XADD", "s4", "5-5", "k", "v")
    c.cmd("XDEL", "s4", "5-5")
    c.cmd("XSETID", "s4", "9-9", "ENTRIESADDED", "3", "MAXDELETEDID", "5-5")
    # Large IDs and integer-looking fields (listpack int encodings).
    c.cmd("XADD", "s5", "18446744073709551614-0", "1", "-1", "12345678901", "x")
    c.cmd("XADD", "s5", "18446744073709551614-18446744073709551615", "1", "2")
    c.cmd("XADD", "s5", "18446744073709551615-0", "a" * 70, "b" * 300)
    for key in ["s1", "s2", "s3", "s4", "s5"]:
        body = body_of(c, key)
        assert body[0] == 19, body[0]
        save("restore_stream", key + "_t19", body)
        save("restore_stream", key + "_t15", b"\x0f" + convert_stream(body[1:], 15))
        save("restore_stream", key + "_t21", b"\x15" + convert_stream(body[1:], 21))
    c.cmd("CONFIG", "SET", "rdbcompression", "yes")
    c.cmd("CONFIG", "SET", "stream-node-max-entries", "100")
    for i in range(30):
        c.cmd("XADD", "s6", "*", "field-%d" % i, "value-" * 8 + str(i))
    save("restore_stream", "s6_t19_lzf", body_of(c, "s6"))


def hlls(c):
    c.cmd("PFADD", "h0")
    c.cmd("PFADD", "h1", "a", "b", "c")
    c.cmd("PFADD", "h2", *["e%d" % i for i in range(300)])
    c.cmd("PFCOUNT", "h2")  # cached cardinality
    c.cmd("PFADD", "h3", *["e%d" % i for i in range(5000)])
    c.cmd("PFMERGE", "h4", "h1", "h2")
    c.cmd("PFADD", "h5", *["e%d" % i for i in range(40)])
    c.cmd("PFDEBUG", "TODENSE", "h5")
    for k in ["h0", "h1", "h2", "h3", "h4", "h5"]:
        save("restore_hll", k, c.cmd("GET", k))


# One op of each kind (see `bitgeo` in crates/commands/src/fuzzing.rs).
OPS = bytes(sum(([code, 37 + code, 91 + 3 * code, 7 * code] for code in range(20)), []))


def bitgeo(c):
    c.cmd("SETBIT", "b1", 100, 1)
    c.cmd("SET", "b2", bytes(range(256)) * 4)
    c.cmd("BITFIELD", "b3", "SET", "i13", "#3", "-100", "SET", "u63", "200", "12345")
    for k in ["b1", "b2", "b3"]:
        save("bitgeo", k, b"\x00\x14" + OPS + c.cmd("GET", k))
    c.cmd("GEOADD", "g1", "13.361389", "38.115556", "m0", "15.087269", "37.502669", "m1")
    pts = []
    for i in range(200):
        pts += ["%f" % (-179 + (i * 1.79) % 358), "%f" % (-85 + (i * 0.85) % 170), "m%d" % i]
    c.cmd("GEOADD", "g2", *pts)
    c.cmd("ZADD", "g3", "0", "m0", "inf", "m1", "-inf", "m2", "4503599627370495", "m3", "1e300", "m4")
    for k in ["g1", "g2", "g3"]:
        save("bitgeo", k, b"\x01\x14" + OPS + body_of(c, k))


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 6379
    c = Conn(port)
    c.cmd("FLUSHALL")
    streams(c)
    hlls(c)
    bitgeo(c)
    c.cmd("FLUSHALL")


if __name__ == "__main__":
    main()
