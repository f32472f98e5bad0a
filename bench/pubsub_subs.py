"""Subscribers for bench/pubsub.sh: opens S connections to 127.0.0.1:PORT,
SUBSCRIBEs each to CHANNEL, prints "ready", then reads until each has
received N messages of the known size (or DEADLINE seconds pass), and
prints the total messages received. Bytes are counted, not parsed: every
message on the channel has the same length."""
import selectors
import socket
import sys
import time

port, subs, channel, payload_len, n, deadline_s = (
    int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4]),
    int(sys.argv[5]), float(sys.argv[6]))

msg_len = len(b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n" % (
    len(channel), channel, payload_len)) + payload_len + 2
sel = selectors.DefaultSelector()
counts = []
for _ in range(subs):
    s = socket.create_connection(("127.0.0.1", port))
    cmd = b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel)
    s.sendall(cmd)
    ack = b""
    want = len(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(channel), channel))
    while len(ack) < want:
        ack += s.recv(want - len(ack))
    s.setblocking(False)
    got = [0]
    counts.append(got)
    sel.register(s, selectors.EVENT_READ, got)
print("ready", flush=True)
target = n * msg_len
end = time.monotonic() + deadline_s
done = 0
while done < subs and time.monotonic() < end:
    for key, _ in sel.select(timeout=0.5):
        got = key.data
        try:
            chunk = key.fileobj.recv(1 << 20)
        except BlockingIOError:
            continue
        if not chunk:
            sel.unregister(key.fileobj)
            done += 1
            continue
        got[0] += len(chunk)
        if got[0] >= target:
            sel.unregister(key.fileobj)
            done += 1
print("messages", sum(g[0] for g in counts) // msg_len, flush=True)
