"""A keyspace-notification listener with redis-py's PubSub against a server
on 127.0.0.1:PORT (issue 22.4): the pattern a session store uses to learn
that a session was written and that it expired.

Run by tests/clients.rs: `python3 redis_py_notify.py PORT`. Exits 0 when
every check passes; any failure raises (non-zero exit, traceback on
stderr). Every wait is bounded.
"""
import sys
import threading
import time

import redis

PORT = int(sys.argv[1])
DEADLINE_S = 10


def wait_message(p, timeout=DEADLINE_S):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m = p.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if m is not None:
            return m
    raise AssertionError("no message within %ss" % timeout)


def main():
    r = redis.Redis(port=PORT, socket_timeout=DEADLINE_S)
    r.ping()
    assert r.config_set("notify-keyspace-events", "KEA")
    assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": "AKE"}

    # Keyspace channel of the session keys: what happened to each key.
    p = r.pubsub()
    p.psubscribe("__keyspace@0__:session:*")
    m = p.get_message(timeout=DEADLINE_S)
    assert m is not None and m["type"] == "psubscribe", m
    r.set("session:1", "alice", px=100)
    m = wait_message(p)
    assert m["type"] == "pmessage", m
    assert m["channel"] == b"__keyspace@0__:session:1" and m["data"] == b"set", m
    m = wait_message(p)
    assert m["channel"] == b"__keyspace@0__:session:1" and m["data"] == b"expire", m
    # Nobody reads the key again: active expiry deletes it.
    m = wait_message(p)
    assert m["channel"] == b"__keyspace@0__:session:1" and m["data"] == b"expired", m
    assert r.exists("session:1") == 0
    r.set("other", "x")
    r.delete("session:none")
    r.hset("session:2", "user", "bob")
    m = wait_message(p)
    assert m["channel"] == b"__keyspace@0__:session:2" and m["data"] == b"hset", m
    r.delete("session:2")
    m = wait_message(p)
    assert m["channel"] == b"__keyspace@0__:session:2" and m["data"] == b"del", m
    p.close()

    # Keyevent channel in a thread: every expired key, on every shard.
    expired = []
    done = threading.Event()
    keys = ["sess:%d" % i for i in range(20)]

    def on_expired(msg):
        expired.append(msg["data"])
        if len(expired) == len(keys):
            done.set()

    p = r.pubsub()
    p.psubscribe(**{"__keyevent@0__:expired": on_expired})
    t = p.run_in_thread(sleep_time=0.01)
    try:
        # The subscription is acknowledged before the keys are written.
        end = time.monotonic() + DEADLINE_S
        while r.pubsub_numpat() != 1:
            assert time.monotonic() < end, "pattern subscription never counted"
            time.sleep(0.01)
        for k in keys:
            r.set(k, "v", px=50)
        assert done.wait(DEADLINE_S), "expired events: %r" % expired
        assert sorted(expired) == sorted(k.encode() for k in keys), expired
    finally:
        t.stop()
        t.join(DEADLINE_S)
        p.close()

    assert r.config_set("notify-keyspace-events", "")
    print("ok")


if __name__ == "__main__":
    main()
