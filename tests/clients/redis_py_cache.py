"""A client-side cache built on redis-py 4 (Debian's python3-redis) the way
applications did before redis-py 5: CLIENT TRACKING with REDIRECT to a
connection subscribed to __redis__:invalidate (RESP2), a dict as the cache,
invalidated by the messages (issue 22.5). Run by tests/clients.rs:
`python3 redis_py_cache.py PORT`; exits 0 when every check passes. Every
wait is bounded.
"""
import sys
import threading
import time

import redis

PORT = int(sys.argv[1])
DEADLINE_S = 10


class CachedClient:
    def __init__(self):
        self.cache = {}
        self.lock = threading.Lock()
        self.inv = redis.Redis(port=PORT, socket_timeout=DEADLINE_S,
                               client_name="cache-invalidations")
        self.ps = self.inv.pubsub()
        self.ps.subscribe(**{"__redis__:invalidate": self.on_invalidate})
        # The pubsub connection's id, for REDIRECT (found by its name: a
        # subscribed RESP2 connection cannot run CLIENT ID).
        redir = None
        for c in redis.Redis(port=PORT, socket_timeout=DEADLINE_S).client_list():
            if c.get("name") == "cache-invalidations":
                redir = c["id"]
        assert redir is not None, "the invalidation connection is not listed"
        self.thread = self.ps.run_in_thread(sleep_time=0.01, daemon=True)
        # One connection, so CLIENT TRACKING applies to every read.
        self.data = redis.Redis(port=PORT, socket_timeout=DEADLINE_S,
                                single_connection_client=True)
        assert self.data.execute_command("CLIENT", "TRACKING", "ON", "REDIRECT", redir)
        self.invalidations = 0

    def on_invalidate(self, msg):
        keys = msg["data"]
        with self.lock:
            self.invalidations += 1
            if keys is None:
                self.cache.clear()
            else:
                for k in keys:
                    self.cache.pop(k, None)

    def get(self, key):
        k = key.encode()
        with self.lock:
            if k in self.cache:
                return self.cache[k]
        v = self.data.get(key)
        with self.lock:
            self.cache[k] = v
        return v

    def close(self):
        self.thread.stop()
        self.thread.join(DEADLINE_S)


def wait_until(what, cond):
    end = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < end, what
        time.sleep(0.01)


def main():
    writer = redis.Redis(port=PORT, socket_timeout=DEADLINE_S)
    c = CachedClient()
    try:
        keys = ["user:%d" % i for i in range(50)]
        for k in keys:
            writer.set(k, "v1")
        for k in keys:
            assert c.get(k) == b"v1"
        assert len(c.cache) == len(keys)
        for k in keys:
            writer.set(k, "v2")
        wait_until("every key invalidated", lambda: len(c.cache) == 0)
        for k in keys:
            assert c.get(k) == b"v2", k
        writer.flushall()
        wait_until("flush invalidated", lambda: len(c.cache) == 0)
        assert c.get(keys[0]) is None
    finally:
        c.close()
    print("redis-py tracking cache: ok")


if __name__ == "__main__":
    main()
