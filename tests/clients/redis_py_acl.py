"""redis-py 4.3 with ACL users against a server on 127.0.0.1:PORT (issue
26.2): `Redis(username=, password=)` authenticates each pooled connection
with AUTH user pass, `acl_setuser` / `acl_getuser` / `acl_whoami` /
`acl_log` parse the replies, and a refusal raises `NoPermissionError`.

Run by tests/clients.rs: `python3 redis_py_acl.py PORT`. Exits 0 when
every check passes; any failure raises. Every wait is bounded.
"""
import sys

import redis

PORT = int(sys.argv[1])
TIMEOUT_S = 10


def main():
    admin = redis.Redis(port=PORT, socket_timeout=TIMEOUT_S, decode_responses=True)
    assert admin.acl_setuser(
        "app", enabled=True, passwords=["+secret"], keys=["app:*"],
        commands=["+get", "+set", "+acl|whoami"], reset=True,
    )
    info = admin.acl_getuser("app")
    assert "on" in info["flags"], info
    assert info["keys"] == ["~app:*"], info
    assert "app" in admin.acl_users(), admin.acl_users()

    app = redis.Redis(port=PORT, username="app", password="secret",
                      socket_timeout=TIMEOUT_S, decode_responses=True)
    assert app.acl_whoami() == "app"
    assert app.set("app:1", "v")
    assert app.get("app:1") == "v"
    try:
        app.get("other")
        raise AssertionError("GET outside the user's keys ran")
    except redis.exceptions.NoPermissionError:
        pass
    try:
        app.hget("app:1", "f")
        raise AssertionError("HGET ran")
    except redis.exceptions.NoPermissionError:
        pass
    log = admin.acl_log(count=1)
    assert log[0]["reason"] == "command" and log[0]["object"] == "hget", log
    assert log[0]["username"] == "app", log

    bad = redis.Redis(port=PORT, username="app", password="wrong", socket_timeout=TIMEOUT_S)
    try:
        bad.ping()
        raise AssertionError("a wrong password authenticated")
    except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError) as e:
        # redis-py 4.3 raises WRONGPASS from its connect as a ResponseError.
        assert "WRONGPASS" in str(e), e

    assert admin.acl_deluser("app") == 1
    print("ok")


if __name__ == "__main__":
    main()
