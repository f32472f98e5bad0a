#!/usr/bin/env python3
"""slowfs: a passthrough FUSE filesystem whose fsync is slow on purpose.

What: mounts BACKING at MOUNTPOINT; every operation goes straight to the
backing directory, except fsync/fdatasync (and fsyncdir), which first
sleep --fsync-ms milliseconds and then do the real fsync/fdatasync. Only
the calling thread sleeps: the filesystem is multithreaded, so other
threads and processes keep reading and writing meanwhile (as with a disk
whose cache flush takes that long).

Why: issue 6 (SET throughput under `appendonly yes` + `appendfsync always`).
On this machine's virtual disk fsync is nearly free, so bench/aof.sh never
sees the disk-bound case, where throughput is bounded by (requests in
flight) / (fsync latency) and the group commit decides the result.
bench/aof.sh uses this with BENCH_SLOW_FSYNC_MS=N.

Counters: with --stats FILE, it rewrites FILE (JSON) twice a second and at
unmount with, per first path component under the mount (one per server
in bench/aof.sh), the number of fsync-type calls, FUSE write requests and
bytes written, the seconds spent in fsync handlers (sleep + real fsync) and
in the real fsyncs alone. Records written per fsync = a direct reading of
the group commit.

Cost: every write(), open() etc. makes a round trip through this Python
process (no writeback cache), tens of microseconds each; compare a
--fsync-ms 0 mount with the plain disk before trusting a result.

Run (needs libfuse2 + fusepy: `apt-get install fuse libfuse2` or `fuse3
libfuse2`, `pip install fusepy`):

    python3 bench/slowfs.py BACKING MOUNTPOINT --fsync-ms 2 [--stats F] &
    ...                                   # use MOUNTPOINT
    fusermount -u MOUNTPOINT              # unmount; the process then exits
    # (fusermount -uz MOUNTPOINT if still busy; or kill the process:
    #  SIGINT/SIGTERM unmount too)

Check: python3 - <<'EOF'
import os, time
fd = os.open("MOUNTPOINT/x", os.O_WRONLY | os.O_CREAT); os.write(fd, b"x")
t = time.perf_counter(); os.fdatasync(fd); print(time.perf_counter() - t)
EOF
"""

import argparse
import errno
import json
import os
import threading
import time

from fuse import FUSE, FuseOSError, Operations


class SlowFS(Operations):
    def __init__(self, root, fsync_ms, stats_path):
        self.root = os.path.realpath(root)
        self.delay = fsync_ms / 1000.0
        self.stats_path = stats_path
        self.lock = threading.Lock()
        self.stats = {}  # top-level name -> counters

    # ---- helpers
    def _full(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def _count(self, path, key, n=1):
        top = path.lstrip("/").split("/", 1)[0] or "/"
        with self.lock:
            s = self.stats.setdefault(
                top, {"fsyncs": 0, "writes": 0, "bytes": 0, "fsync_s": 0.0,
                       "fsync_real_s": 0.0}
            )
            s[key] += n

    def dump_stats(self):
        if not self.stats_path:
            return
        with self.lock:
            text = json.dumps(self.stats, sort_keys=True)
        tmp = self.stats_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, self.stats_path)

    def _slow_sync(self, path, fn, fd):
        t0 = time.perf_counter()
        if self.delay > 0:
            time.sleep(self.delay)
        t1 = time.perf_counter()
        fn(fd)
        t2 = time.perf_counter()
        self._count(path, "fsyncs")
        self._count(path, "fsync_s", t2 - t0)
        self._count(path, "fsync_real_s", t2 - t1)

    # ---- the slow part
    def fsync(self, path, datasync, fh):
        self._slow_sync(path, os.fdatasync if datasync else os.fsync, fh)
        return 0

    def fsyncdir(self, path, datasync, fh):
        fd = os.open(self._full(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._slow_sync(path, os.fsync, fd)
        finally:
            os.close(fd)
        return 0

    # ---- everything else: passthrough
    def access(self, path, mode):
        if not os.access(self._full(path), mode):
            raise FuseOSError(errno.EACCES)

    def chmod(self, path, mode):
        return os.chmod(self._full(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._full(path), uid, gid)

    def getattr(self, path, fh=None):
        st = os.lstat(self._full(path))
        return {k: getattr(st, k) for k in (
            "st_atime", "st_ctime", "st_mtime", "st_gid", "st_mode",
            "st_nlink", "st_size", "st_uid", "st_blocks")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def readlink(self, path):
        return os.readlink(self._full(path))

    def mknod(self, path, mode, dev):
        return os.mknod(self._full(path), mode, dev)

    def mkdir(self, path, mode):
        return os.mkdir(self._full(path), mode)

    def rmdir(self, path):
        return os.rmdir(self._full(path))

    def unlink(self, path):
        return os.unlink(self._full(path))

    def symlink(self, name, target):
        return os.symlink(target, self._full(name))

    def link(self, target, name):
        return os.link(self._full(name), self._full(target))

    def rename(self, old, new):
        return os.rename(self._full(old), self._full(new))

    def utimens(self, path, times=None):
        return os.utime(self._full(path), times)

    def statfs(self, path):
        st = os.statvfs(self._full(path))
        return {k: getattr(st, k) for k in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
            "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def open(self, path, flags):
        return os.open(self._full(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._full(path), os.O_RDWR | os.O_CREAT, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        n = os.pwrite(fh, data, offset)
        self._count(path, "writes")
        self._count(path, "bytes", n)
        return n

    def truncate(self, path, length, fh=None):
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._full(path), length)

    def flush(self, path, fh):
        return 0  # close() is not a durability point: no delay

    def release(self, path, fh):
        return os.close(fh)

    def destroy(self, path):
        self.dump_stats()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("backing")
    ap.add_argument("mountpoint")
    ap.add_argument("--fsync-ms", type=float, default=2.0,
                    help="sleep this long before each real fsync (default 2)")
    ap.add_argument("--stats", help="JSON counters file, rewritten every 0.5 s")
    a = ap.parse_args()
    fs = SlowFS(a.backing, a.fsync_ms, a.stats)
    if a.stats:
        def loop():
            while True:
                time.sleep(0.5)
                fs.dump_stats()
        threading.Thread(target=loop, daemon=True).start()
    FUSE(fs, a.mountpoint, foreground=True, nothreads=False, big_writes=True,
         max_write=1 << 20, fsname="slowfs")


if __name__ == "__main__":
    main()
