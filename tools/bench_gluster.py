#!/usr/bin/env python3
"""Cold sequential reads from a GlusterFS volume: squeezefs (BACKING on the
volume) vs the same logical data stored raw on the volume.

  (a) loopback: glusterd, brick and client on this machine, as is;
  (b) shaped:   glusterd and brick in their own network namespace behind a
                veth pair shaped with tc tbf to 1 Gbit/s each way; the
                client (and squeezefs) in the root namespace. Only namespace
                addresses (10.211.0.1/30 <-> 10.211.0.2/30) are used.

Data: TAQ-like trades, `squeezefs bench --gen taq-trade --dump`. Before every
timed read: the GlusterFS client is unmounted and mounted again and the page
cache dropped (echo 3 > /proc/sys/vm/drop_caches). Raw and squeezefs reads
alternate (order flipped every run); medians of --runs.

Also the reader's cost of revalidation per open: N opens+closes of an
unchanged file on a read-only mount vs on the writer's mount (loopback).

Needs root, glusterfs-server/-client (tools/install-deps.sh), iproute2 + tc.
Usage: tools/bench_gluster.py [--size 256M] [--runs 3] [--modes loopback,shaped]
       [--baseline OTHER_SQUEEZEFS_BINARY]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from benchlib import drop_caches_or_fail as drop_caches  # noqa: E402
from glusterlib import Gluster, GlusterUnavailable  # noqa: E402
from mountlib import Mount, squeezefs_bin  # noqa: E402

NS, VETH_C, VETH_S = "sqzbench", "sqzb0", "sqzb1"
IP_C, IP_S = "10.211.0.1", "10.211.0.2"


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def net_up(rate):
    net_down()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VETH_C, "type", "veth", "peer", "name", VETH_S)
    sh("ip", "link", "set", VETH_S, "netns", NS)
    sh("ip", "addr", "add", IP_C + "/30", "dev", VETH_C)
    sh("ip", "link", "set", VETH_C, "up")
    ns = ("ip", "netns", "exec", NS)
    sh(*ns, "ip", "addr", "add", IP_S + "/30", "dev", VETH_S)
    sh(*ns, "ip", "link", "set", VETH_S, "up")
    sh(*ns, "ip", "link", "set", "lo", "up")
    tbf = ("root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms")
    sh("tc", "qdisc", "add", "dev", VETH_C, *tbf)
    sh(*ns, "tc", "qdisc", "add", "dev", VETH_S, *tbf)


def net_down():
    sh("ip", "link", "del", VETH_C, check=False)
    sh("ip", "netns", "del", NS, check=False)


def read_all(path, bs=1 << 20):
    n = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bs)
            if not b:
                break
            n += len(b)
    return n, time.perf_counter() - t0


def du_bytes(path):
    return os.stat(path).st_blocks * 512


class BaseMount(Mount):
    """The read-only mount of another squeezefs binary (--baseline)."""
    binary = None

    def cmd(self):
        c = super().cmd()
        c[0] = self.binary
        return c


def bench_mode(mode, data, runs, base, nopens, rate, baseline=None):
    g = Gluster(os.path.join(base, mode), netns=NS if mode == "shaped" else None,
                host=IP_S if mode == "shaped" else None)
    client = os.path.join(base, mode, "client")
    out = {"mode": mode}
    mounts = []
    try:
        if mode == "shaped":
            net_up(rate)
        g.start()
        g.mount(client)
        os.makedirs(os.path.join(client, "raw"), exist_ok=True)
        os.makedirs(os.path.join(client, "sqz"), exist_ok=True)
        t0 = time.perf_counter()
        shutil.copyfile(data, os.path.join(client, "raw", "taq.csv"))
        os.sync()
        out["write_raw_s"] = time.perf_counter() - t0
        w = Mount(os.path.join(client, "sqz"), os.path.join(base, mode, "w"))
        mounts.append(w)
        t0 = time.perf_counter()
        with open(data, "rb") as src, open(w.path("taq.csv"), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        out["write_sqz_s"] = time.perf_counter() - t0
        if nopens:
            r = Mount(os.path.join(client, "sqz"), os.path.join(base, mode, "ro"),
                      options=["ro", "revalidate=1"])
            mounts.append(r)
            targets = (("writer", w), ("ro", r))
            ts = {name: [] for name, _ in targets}
            for name, m in targets:
                open(m.path("taq.csv"), "rb").close()
            for rnd in range(5):  # interleaved, order flipped every round
                for name, m in (targets if rnd % 2 == 0 else targets[::-1]):
                    p = m.path("taq.csv")
                    t0 = time.perf_counter()
                    for _ in range(nopens):
                        os.close(os.open(p, os.O_RDONLY))
                    ts[name].append((time.perf_counter() - t0) / nopens * 1e6)
            out["opens"] = {name: {"us_per_open": statistics.median(v), "runs": v}
                            for name, v in ts.items()}
            r.unmount()
            mounts.remove(r)
        w.unmount()
        mounts.remove(w)
        logical = os.path.getsize(data)
        out["logical_bytes"] = logical
        out["container_bytes"] = os.path.getsize(os.path.join(client, "sqz", "taq.csv"))
        kinds = ("raw", "sqz") + (("base",) if baseline else ())
        res = {k: [] for k in kinds}
        BaseMount.binary = baseline
        for run in range(runs):
            order = kinds if run % 2 == 0 else kinds[::-1]
            for kind in order:
                g.umount(client)
                g.mount(client)
                m = None
                if kind in ("sqz", "base"):
                    m = (Mount if kind == "sqz" else BaseMount)(
                        os.path.join(client, "sqz"), os.path.join(base, mode, "r"),
                        options=["ro"])
                    mounts.append(m)
                    path = m.path("taq.csv")
                else:
                    path = os.path.join(client, "raw", "taq.csv")
                drop_caches()
                n, dt = read_all(path)
                assert n == logical, f"{kind}: read {n} of {logical} bytes"
                res[kind].append(logical / dt / 1e6)
                print(f"  {mode} run {run} {kind}: {logical / dt / 1e6:.1f} MB/s ({dt:.2f} s)",
                      flush=True)
                if m:
                    m.unmount()
                    mounts.remove(m)
        out["raw_MBps"] = statistics.median(res["raw"])
        out["sqz_MBps"] = statistics.median(res["sqz"])
        out["raw_runs"] = res["raw"]
        out["sqz_runs"] = res["sqz"]
        out["ratio"] = out["sqz_MBps"] / out["raw_MBps"]
        if baseline:
            out["base_MBps"] = statistics.median(res["base"])
            out["base_runs"] = res["base"]
    finally:
        for m in mounts:
            try:
                m.unmount(timeout=30)
            except Exception:
                m.kill()
        g.stop()
        if mode == "shaped":
            net_down()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="256M")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="loopback,shaped")
    ap.add_argument("--rate", default="1gbit", help="tc tbf rate of the shaped link")
    ap.add_argument("--opens", type=int, default=1000)
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--baseline", help="a second squeezefs binary (e.g. the commit before a "
                    "change), read in the same rounds: 'base'")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_gluster: needs root (glusterd, mounts, netns, drop_caches)")
    base = tempfile.mkdtemp(prefix="sqz-bench-gluster-", dir="/var/tmp")
    results = []
    try:
        data = os.path.join(base, "taq.csv")
        subprocess.run([squeezefs_bin(), "bench", "--gen", "taq-trade", "--size", a.size,
                        "--dump", data], check=True)
        print(f"data: {os.path.getsize(data)} bytes of taq-trade", flush=True)
        for mode in a.modes.split(","):
            try:
                r = bench_mode(mode, data, a.runs, base, a.opens if mode == "loopback" else 0,
                               a.rate, a.baseline)
            except (GlusterUnavailable, RuntimeError) as e:
                r = {"mode": mode, "error": str(e)}
                print(f"{mode}: NOT MEASURED: {e}", flush=True)
            results.append(r)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    print("| setup | raw MB/s | squeezefs MB/s | squeezefs/raw | stored bytes raw / sqz |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['mode']} | not measured: {r['error']} | | | |")
            continue
        print(f"| {r['mode']} | {r['raw_MBps']:.0f} | {r['sqz_MBps']:.0f} | {r['ratio']:.2f}x | "
              f"{r['logical_bytes']} / {r['container_bytes']} |")
        if "base_MBps" in r:
            print(f"| {r['mode']}, baseline binary | {r['raw_MBps']:.0f} | {r['base_MBps']:.0f} | "
                  f"{r['base_MBps'] / r['raw_MBps']:.2f}x | |")
    for r in results:
        if "opens" in r:
            o = r["opens"]
            print(f"\nopen+close of an unchanged file ({a.opens}x, median of 5 interleaved): writer mount "
                  f"{o['writer']['us_per_open']:.1f} us, ro mount {o['ro']['us_per_open']:.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
