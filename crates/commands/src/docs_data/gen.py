#!/usr/bin/env python3
"""Regenerates redis-7.0.15.resp3: Redis's own command metadata (COMMAND DOCS
and the tips / key specs of COMMAND INFO) for every command, one record per
command and subcommand, read by docs.rs.

Usage: gen.py /path/to/redis.sock > redis-7.0.15.resp3
(against `redis-server --port 0 --unixsocket /path/to/redis.sock --save ''`,
version 7.0.15).

Format: one RESP3 map, full name (`get`, `client|list`) -> array of
[docs map without `subcommands`, tips set, key specs set], each record
followed by a newline. Subcommands are records of their own so docs.rs can
list only the subcommands Tessera has. Records Redis 7.0 lacks but Tessera
implements (7.2's CLIENT SETINFO and CLIENT NO-TOUCH) are added from Redis
7.2's command JSON files below.
"""
import socket
import sys


def read(f):
    line = f.readline()
    t, rest = line[:1], line[1:-2]
    if t in b'+-':
        return ('simple', rest.decode())
    if t == b':':
        return ('int', int(rest))
    if t in b'$=':
        n = int(rest)
        if n < 0:
            return ('null',)
        return ('bulk', f.read(n + 2)[:-2])
    if t == b'_':
        return ('null',)
    if t in b'*~':
        return ('array' if t == b'*' else 'set', [read(f) for _ in range(int(rest))])
    if t == b'%':
        return ('map', [(read(f), read(f)) for _ in range(int(rest))])
    raise ValueError(line)


def enc(v):
    k = v[0]
    if k == 'simple':
        return b'+' + v[1].encode() + b'\r\n'
    if k == 'int':
        return b':%d\r\n' % v[1]
    if k == 'bulk':
        return b'$%d\r\n%s\r\n' % (len(v[1]), v[1])
    if k == 'null':
        return b'_\r\n'
    if k in ('array', 'set'):
        tag = b'*' if k == 'array' else b'~'
        return tag + b'%d\r\n' % len(v[1]) + b''.join(enc(x) for x in v[1])
    if k == 'map':
        return b'%%%d\r\n' % len(v[1]) + b''.join(enc(a) + enc(b) for a, b in v[1])
    raise ValueError(v)


def bulk(s):
    return ('bulk', s.encode())


def arg(name, typ, token=None):
    pairs = [(bulk('name'), bulk(name)), (bulk('type'), bulk(typ))]
    if token:
        pairs.append((bulk('token'), bulk(token)))
    return ('map', pairs)


def oneof(name, args):
    return ('map', [(bulk('name'), bulk(name)), (bulk('type'), bulk('oneof')),
                    (bulk('arguments'), ('array', args))])


def docs(summary, since, group, complexity, args):
    return ('map', [(bulk('summary'), bulk(summary)), (bulk('since'), bulk(since)),
                    (bulk('group'), bulk(group)), (bulk('complexity'), bulk(complexity)),
                    (bulk('arguments'), ('array', args))])


def cmd(f, s, *args):
    s.sendall(b'*%d\r\n' % len(args)
              + b''.join(b'$%d\r\n%s\r\n' % (len(a), a.encode()) for a in args))
    return read(f)


def main():
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    f = s.makefile('rb')
    cmd(f, s, 'HELLO', '3')
    records = {}

    def add_docs(name, d):
        for a, b in d[1]:
            if a[1] == b'subcommands':
                for sk, sv in b[1]:
                    add_docs(sk[1].decode(), sv)
        pairs = [(a, b) for a, b in d[1] if a[1] != b'subcommands']
        records.setdefault(name, [None, None, None])[0] = ('map', pairs)

    def add_info(info):
        items = info[1]
        rec = records.setdefault(items[0][1].decode(), [None, None, None])
        rec[1], rec[2] = items[7], items[8]
        for sub in items[9][1]:
            add_info(sub)

    for k, v in cmd(f, s, 'COMMAND', 'DOCS')[1]:
        add_docs(k[1].decode(), v)
    for info in cmd(f, s, 'COMMAND', 'INFO')[1]:
        add_info(info)

    # Redis 7.2: src/commands/client-setinfo.json, client-no-touch.json.
    records['client|setinfo'] = [
        docs('Sets information specific to the client or connection.', '7.2.0',
             'connection', 'O(1)',
             [oneof('attr', [arg('libname', 'string', 'LIB-NAME'),
                             arg('libver', 'string', 'LIB-VER')])]),
        ('set', [bulk('request_policy:all_nodes'), bulk('response_policy:all_succeeded')]),
        ('set', [])]
    records['client|no-touch'] = [
        docs('Controls whether commands sent by the client affect the LRU/LFU of accessed '
             'keys.', '7.2.0', 'connection', 'O(1)',
             [oneof('enabled', [arg('on', 'pure-token', 'ON'),
                                arg('off', 'pure-token', 'OFF')])]),
        ('set', []), ('set', [])]

    out = [b'%%%d\r\n' % len(records)]
    for name in sorted(records):
        d, tips, specs = records[name]
        rec = ('array', [d or ('map', []), tips or ('set', []), specs or ('set', [])])
        out.append(enc(bulk(name)) + enc(rec) + b'\n')
    sys.stdout.buffer.write(b''.join(out))


main()
