"""redis-py's scripting users against a server on 127.0.0.1:PORT (issue 23):
`Lock` (acquire, extend, reacquire, release, two threads contending for
one lock), `register_script` (EVALSHA with the NOSCRIPT fallback, in a
pipeline too), and the function commands (FUNCTION LOAD, FCALL, FCALL_RO,
LIST, DUMP, RESTORE, DELETE, FLUSH).

Run by tests/clients.rs: `python3 redis_py_scripting.py PORT`. Exits 0
when every check passes; any failure raises (non-zero exit, traceback on
stderr). Every wait is bounded.
"""
import sys
import threading

import redis
from redis.exceptions import LockError, LockNotOwnedError, NoScriptError, ResponseError

PORT = int(sys.argv[1])
DEADLINE_S = 10


def check_lock(r):
    lock = r.lock("lock:a", timeout=5, blocking_timeout=DEADLINE_S)
    assert lock.acquire()
    assert lock.locked() and lock.owned()
    ttl = r.pttl("lock:a")
    assert 0 < ttl <= 5000, ttl
    # extend adds to the remaining time (LUA_EXTEND_SCRIPT).
    assert lock.extend(10)
    assert r.pttl("lock:a") > 5000
    # replace_ttl sets it.
    assert lock.extend(3, replace_ttl=True)
    assert r.pttl("lock:a") <= 3000
    assert lock.reacquire()
    assert 3000 < r.pttl("lock:a") <= 5000
    # Another owner cannot take it without waiting, nor release it.
    other = r.lock("lock:a", timeout=5, blocking_timeout=0.05)
    assert not other.acquire()
    lock.release()
    assert not r.exists("lock:a")
    try:
        lock.release()
        raise AssertionError("released twice")
    except LockError:
        pass
    # A lock taken over by someone else cannot be released or extended.
    assert lock.acquire()
    r.set("lock:a", "someone-else")
    try:
        lock.extend(1)
        raise AssertionError("extended another owner's lock")
    except LockNotOwnedError:
        pass
    try:
        lock.release()
        raise AssertionError("released another owner's lock")
    except LockNotOwnedError:
        pass
    assert r.get("lock:a") == b"someone-else"
    r.delete("lock:a")


def check_contention(port):
    """Two threads increment one counter under one lock, with a
    read-modify-write that would lose updates without mutual exclusion."""
    rounds = 100
    errors = []

    def worker():
        try:
            c = redis.Redis(port=port, socket_timeout=DEADLINE_S)
            for _ in range(rounds):
                with c.lock("lock:counter", timeout=5, blocking_timeout=DEADLINE_S,
                            sleep=0.001):
                    v = int(c.get("counter") or 0)
                    c.set("counter", v + 1)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a lock worker hung"
    assert not errors, errors
    r = redis.Redis(port=port, socket_timeout=DEADLINE_S)
    assert int(r.get("counter")) == 2 * rounds, r.get("counter")
    assert not r.exists("lock:counter")


def check_register_script(r):
    incr = r.register_script("return redis.call('incrby', KEYS[1], ARGV[1])")
    assert incr(keys=["s:n"], args=[2]) == 2
    assert r.script_exists(incr.sha) == [True]
    r.script_flush()
    assert r.script_exists(incr.sha) == [False]
    try:
        r.evalsha(incr.sha, 1, "s:n", 1)
        raise AssertionError("EVALSHA after SCRIPT FLUSH")
    except NoScriptError:
        pass
    # The Script object falls back to EVAL (SCRIPT LOAD) on NOSCRIPT.
    assert incr(keys=["s:n"], args=[3]) == 5
    assert r.script_exists(incr.sha) == [True]
    # In a pipeline, scripts are loaded before it runs.
    r.script_flush()
    pipe = r.pipeline()
    incr(keys=["s:n"], args=[10], client=pipe)
    pipe.get("s:n")
    assert pipe.execute() == [15, b"15"]
    # A script's error surfaces as ResponseError.
    bad = r.register_script("return redis.call('incr', KEYS[1])")
    r.set("s:str", "x")
    try:
        bad(keys=["s:str"])
        raise AssertionError("no error")
    except ResponseError as e:
        assert "not an integer" in str(e), e


def check_functions(r):
    r.function_flush()
    code = (
        "#!lua name=mylib\n"
        "redis.register_function('bump', function(keys, args)\n"
        "  return redis.call('incrby', keys[1], args[1]) end)\n"
        "redis.register_function{function_name='read', flags={'no-writes'},\n"
        "  callback=function(keys) return redis.call('get', keys[1]) end}\n"
    )
    assert r.function_load(code) == b"mylib"
    assert r.fcall("bump", 1, "f:n", 4) == 4
    assert r.fcall_ro("read", 1, "f:n") == b"4"
    try:
        r.fcall_ro("bump", 1, "f:n", 1)
        raise AssertionError("FCALL_RO ran a writing function")
    except ResponseError as e:
        assert "write flag" in str(e), e
    libs = r.function_list(library="mylib", withcode=True)
    assert len(libs) == 1
    lib = libs[0]
    # redis-py gives the flat RESP2 list.
    assert lib[1] == b"mylib" and code.encode() in lib, lib
    dump = r.function_dump()
    r.function_delete("mylib")
    try:
        r.fcall("bump", 1, "f:n", 1)
        raise AssertionError("function still there")
    except ResponseError as e:
        assert "Function not found" in str(e), e
    assert r.function_restore(dump)
    assert r.fcall("bump", 1, "f:n", 1) == 5
    try:
        r.function_restore(dump)
        raise AssertionError("restored twice with APPEND")
    except ResponseError as e:
        assert "already exists" in str(e), e
    assert r.function_restore(dump, "REPLACE")
    r.function_flush()
    assert r.function_list() == []


def main():
    r = redis.Redis(port=PORT, socket_timeout=DEADLINE_S)
    r.ping()
    r.flushall()
    r.function_flush()
    check_lock(r)
    check_contention(PORT)
    check_register_script(r)
    check_functions(r)
    print("ok")


if __name__ == "__main__":
    main()
