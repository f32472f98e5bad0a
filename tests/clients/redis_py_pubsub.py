"""redis-py's PubSub against a server on 127.0.0.1:PORT (issue 22).

Run by tests/clients.rs: `python3 redis_py_pubsub.py PORT`. Exits 0 when
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

    # get_message with channels and patterns.
    p = r.pubsub()
    p.subscribe("orders")
    p.psubscribe("user:*")
    # Subscription confirmations come first.
    kinds = set()
    for _ in range(2):
        m = p.get_message(timeout=DEADLINE_S)
        assert m is not None, "no subscribe confirmation"
        kinds.add(m["type"])
    assert kinds == {"subscribe", "psubscribe"}, kinds
    assert r.publish("orders", "o1") == 1
    m = wait_message(p)
    assert m["type"] == "message" and m["channel"] == b"orders" and m["data"] == b"o1", m
    assert r.publish("user:42", "hello") == 1
    m = wait_message(p)
    assert m["type"] == "pmessage" and m["pattern"] == b"user:*", m
    assert m["channel"] == b"user:42" and m["data"] == b"hello", m
    assert r.pubsub_numsub("orders") == [(b"orders", 1)]
    assert r.pubsub_numpat() == 1
    assert r.pubsub_channels() == [b"orders"]
    p.unsubscribe("orders")
    p.punsubscribe("user:*")
    for _ in range(2):
        p.get_message(timeout=DEADLINE_S)
    assert r.publish("orders", "o2") == 0
    p.close()

    # run_in_thread with handlers.
    got = []
    done = threading.Event()

    def handler(msg):
        got.append(msg["data"])
        if len(got) == 100:
            done.set()

    p = r.pubsub()
    p.subscribe(**{"jobs": handler})
    t = p.run_in_thread(sleep_time=0.01, daemon=True)
    try:
        end = time.monotonic() + DEADLINE_S
        while r.pubsub_numsub("jobs")[0][1] != 1:
            assert time.monotonic() < end, "handler never subscribed"
            time.sleep(0.01)
        for i in range(100):
            assert r.publish("jobs", str(i)) == 1
        assert done.wait(DEADLINE_S), "handler got %d of 100" % len(got)
        assert got == [str(i).encode() for i in range(100)], got
    finally:
        t.stop()
        t.join(DEADLINE_S)

    # Pattern handler in a second client; PING while subscribed.
    p = r.pubsub()
    p.psubscribe("ev.*")
    p.get_message(timeout=DEADLINE_S)
    p.ping()
    m = p.get_message(timeout=DEADLINE_S)
    assert m is not None and m["type"] == "pong", m
    r.publish("ev.a", "x")
    m = wait_message(p)
    assert m["data"] == b"x", m
    p.close()
    print("redis-py pubsub: ok")


if __name__ == "__main__":
    main()
