# bench/malloc_gdb.py - what glibc's malloc holds in a running server, by
# thread and by arena (issue 23's RSS investigation; bench/README.md).
#
#   gdb -p PID -batch -ex 'source bench/malloc_gdb.py' 2>/dev/null \
#     | grep -E '^(tcache|arena|total)'
#
# Prints, per thread, the chunks its tcache holds (size:count, and bytes),
# and per arena its size (system_mem), the free bytes in its bins and
# fastbins, and its top chunk. RSS minus what the program holds live
# (INFO used_memory) is, roughly, tcache + free bins + top + stacks.
#
# Needs glibc's debug symbols (Debian: libc6-dbg) and a glibc with
# tcache and safe-linking (2.32+; written against 2.36). The process is
# stopped while gdb is attached (a second or two); it reads only.
# A server under valgrind or run with GLIBC_TUNABLES set by hand works
# the same way.
import gdb

CHUNK = gdb.lookup_type("struct malloc_chunk").pointer()


def chunk_size(addr):
    return int(gdb.Value(addr).cast(CHUNK).dereference()["mchunk_size"]) & ~7


def tcaches():
    total = 0
    for th in gdb.selected_inferior().threads():
        th.switch()
        tc = gdb.parse_and_eval("tcache")
        if int(tc) == 0:
            continue
        counts = tc.dereference()["counts"]
        held, parts = 0, []
        for i in range(64):
            c = int(counts[i])
            if c:
                size = 32 + 16 * i
                held += c * size
                parts.append("%d:%d" % (size, c))
        total += held
        print("tcache %-14s %8d bytes  %s" % (th.name, held, " ".join(parts)))
    print("total tcache %d bytes" % total)


def arenas():
    a = gdb.parse_and_eval("&main_arena")
    start = int(a)
    while True:
        ar = a.dereference()
        free = nfree = 0
        bins = ar["bins"]
        for i in range(1, 127):
            # A bin's head is a fake chunk whose fd/bk are the bin's pair.
            head = int(bins[2 * i - 2].address) - 16
            p = int(gdb.Value(head).cast(CHUNK).dereference()["fd"])
            n = 0
            while p != head and n < 1_000_000:
                free += chunk_size(p)
                nfree += 1
                p = int(gdb.Value(p).cast(CHUNK).dereference()["fd"])
                n += 1
        fast = nfast = 0
        for i in range(10):
            p = int(ar["fastbinsY"][i])
            n = 0
            while p != 0 and n < 1_000_000:
                fast += chunk_size(p)
                nfast += 1
                # Safe-linking: fd is stored xor-ed with its own address >> 12.
                p = ((p + 16) >> 12) ^ int(gdb.Value(p).cast(CHUNK).dereference()["fd"])
                n += 1
        top = chunk_size(int(ar["top"]))
        print(
            "arena %#x system_mem=%d bins_free=%d (%d chunks) fastbins=%d (%d) top=%d"
            % (int(a), int(ar["system_mem"]), free, nfree, fast, nfast, top)
        )
        a = ar["next"]
        if int(a) == start:
            break


tcaches()
arenas()
