#!/usr/bin/env python3
"""report.py: turn the raw results of integration/bench/run.sh into report.md and plots.

    python3 integration/bench/report.py DIR

DIR/raw holds what guest-bench.sh wrote (fio JSON, CPU samples, perftest output, TSV
indexes) and raw/host what run.sh recorded on the host. Writes DIR/report.md,
DIR/summary.json (the medians, for scripts), DIR/plot/ (gnuplot data and script) and
DIR/iops-vs-qd.png (gnuplot). Python 3 standard library only; gnuplot from Debian
(gnuplot-nox) for the PNG: without it the report says so and is still written.
"""

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

TARGETS = ("kernel", "gonvmf")
BACKENDS = ("null", "file")
MAIN_JOBS = ("randread-4k-qd1", "randread-4k-qd32", "randwrite-4k-qd32", "read-128k-qd16", "write-128k-qd16")
# the 128k jobs again with fio on vCPU 0 only: one of the host's I/O queues (guest-bench.sh)
PIN_JOBS = ("read-128k-qd16-cpu0", "write-128k-qd16-cpu0")
BACKEND_TEXT = {
    "null": "kernel: null_blk `/dev/nullb0` (16 GiB, 512 B blocks); gonvmf: its `null` backend (16 GiB, 512 B)."
    " Not the same code: the kernel target cannot use a userspace null device, so each target gets"
    " the cheapest backend it has; both discard writes and return zeroes without touching storage.",
    "file": "the same fully written file on the guest's ext4 scratch disk (virtio-blk), opened with"
    " O_DIRECT by both targets, exported with 4 KiB blocks.",
}
# metric: (label, unit, higher is better)
METRICS = {
    "iops": ("IOPS", "", True),
    "mibps": ("bandwidth", "MiB/s", True),
    "lat_mean": ("latency mean", "µs", False),
    "lat_p50": ("latency p50", "µs", False),
    "lat_p99": ("latency p99", "µs", False),
    "lat_p999": ("latency p99.9", "µs", False),
    "cpu_us_io": ("CPU per I/O, all but fio", "µs", False),
    "cpu_all_us_io": ("CPU per I/O, whole guest", "µs", False),
    "proc_us_io": ("CPU per I/O, gonvmf process", "µs", False),
    "proc_user_us_io": ("CPU per I/O, gonvmf process, user mode", "µs", False),
    "proc_sys_us_io": ("CPU per I/O, gonvmf process, system mode", "µs", False),
    "sys_io": ("system calls per I/O, gonvmf process", "", False),
    "cs_io": ("context switches per I/O, all but fio", "", False),
    "proc_cs_io": ("context switches per I/O, gonvmf process", "", False),
    "soft_cs_io": ("context switches per I/O, softirq threads", "", False),
    "soft_wake_io": ("softirq-thread wake-ups per I/O", "", False),
    "proc_wait_io": ("run-queue wait per I/O, gonvmf process", "µs", False),
    "soft_wait_io": ("run-queue wait per I/O, softirq threads", "µs", False),
    "fio_wait_io": ("run-queue wait per I/O, fio", "µs", False),
}
# metrics only the gonvmf process has (the kernel target runs in kernel threads and softirqs)
PROC_ONLY = ("proc_us_io", "proc_user_us_io", "proc_sys_us_io", "sys_io", "proc_cs_io", "proc_wait_io")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: report.py DIR  (DIR/raw from integration/bench/run.sh)")
    out = os.path.abspath(sys.argv[1])
    raw = os.path.join(out, "raw")
    if not os.path.isdir(raw):
        sys.exit("report.py: %s has no raw/ directory" % out)
    data = load(raw)
    if not data["runs"] and not data["sessions"]:
        sys.exit("report.py: no results in %s (runs.tsv and sessions.tsv are empty or missing; see %s/guest.log)" % (raw, raw))
    stats = summarize(data)
    plot_note = plot(out, data, stats)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(render(out, data, stats, plot_note))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(stats["json"], f, indent=1, sort_keys=True)
    print("report: %s" % os.path.join(out, "report.md"))
    if plot_note is None:
        print("plot: %s" % os.path.join(out, "iops-vs-qd.png"))
    else:
        print("plot: not drawn: %s" % plot_note)


# ---------------------------------------------------------------- loading


def read_tsv(path):
    try:
        with open(path) as f:
            lines = [l.rstrip("\n") for l in f if l.strip()]
    except OSError:
        return []
    if not lines:
        return []
    head = lines[0].split("\t")
    rows = []
    for l in lines[1:]:
        v = l.split("\t")
        v += [""] * (len(head) - len(v))
        rows.append(dict(zip(head, v)))
    return rows


def read_kv(path, sep=":"):
    d = {}
    try:
        with open(path) as f:
            for l in f:
                if sep in l:
                    k, v = l.split(sep, 1)
                    d[k.strip()] = v.strip().strip('"')
    except OSError:
        pass
    return d


def fnum(s):
    try:
        v = float(s)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def load(raw):
    d = {
        "raw": raw,
        "params": read_kv(os.path.join(raw, "params.env"), "="),
        "guest": read_kv(os.path.join(raw, "meta", "guest.txt")),
        "host": read_kv(os.path.join(raw, "host", "machine.txt")),
        "sessions": read_tsv(os.path.join(raw, "sessions.tsv")),
        "scaling": read_tsv(os.path.join(raw, "scaling.tsv")),
        "runs": [],
        "errors": [],
        "cpu_notes": [],
    }
    for name in ("build.txt", "gonvmf-status.txt"):
        p = os.path.join(raw, "host", name) if name == "build.txt" else os.path.join(raw, name)
        try:
            d[name] = open(p).read().strip()
        except OSError:
            d[name] = ""
    try:
        d["vm_status"] = open(os.path.join(raw, ".vm", "status")).read().strip()
    except OSError:
        d["vm_status"] = ""
    hz = fnum(d["params"].get("HZ")) or 100.0
    ncpu = fnum(d["params"].get("NCPU")) or 1.0
    for r in read_tsv(os.path.join(raw, "runs.tsv")):
        run = {k: r[k] for k in ("rep", "backend", "target", "job", "rw", "bs")}
        run["qd"] = int(r["qd"])
        run["json"] = r["json"]
        run.update(parse_fio(os.path.join(raw, r["json"]), r["fio_rc"], r["job"]))
        if run.get("error"):
            d["errors"].append("%s rep %s %s %s: %s" % (r["target"], r["rep"], r["backend"], r["job"], run["error"]))
        else:
            run.update(parse_cpu(os.path.join(raw, r["cpu"]), run, hz, ncpu, r["target"] == "gonvmf"))
            if run.get("cpu_note"):
                d["cpu_notes"].append("%s rep %s %s %s: %s" % (r["target"], r["rep"], r["backend"], r["job"], run["cpu_note"]))
        d["runs"].append(run)
    d["perftest"] = parse_perftest(os.path.join(raw, "perftest"))
    return d


_FIO_CACHE = {}


def read_fio_json(path):
    """A session's fio JSON output (cached): {"jobs": {name: job}} or {"error": why}."""
    if path not in _FIO_CACHE:
        try:
            text = open(path).read()
            # fio writes "<job> : Saving output of prerun in ..." lines into --output before the JSON
            i = 0 if text.startswith("{") else text.find("\n{") + 1
            if i < 0 or (i == 0 and not text.startswith("{")):
                raise ValueError("no JSON object in the output")
            top = json.loads(text[i:])
            _FIO_CACHE[path] = {"jobs": {j["jobname"]: j for j in top["jobs"]}}
        except (OSError, ValueError, KeyError, TypeError) as e:
            _FIO_CACHE[path] = {"error": "unreadable fio JSON %s: %s" % (os.path.basename(path), e)}
    return _FIO_CACHE[path]


def parse_fio(path, rc, name):
    """One job's results from its session's fio JSON. A job that completed counts even when
    fio's exit status says another job of the session failed."""
    out = read_fio_json(path)
    j = out.get("jobs", {}).get(name)
    if j is None:
        return {"error": "fio exited %s" % rc if rc != "0" else out.get("error", "job %s not in %s" % (name, os.path.basename(path)))}
    if j.get("error"):
        return {"error": "fio job error %s" % j["error"]}
    s = j["read"] if j["read"]["io_bytes"] > 0 else j["write"]
    if not s["io_bytes"]:
        return {"error": "no I/O completed"}
    pct = s.get("lat_ns", {}).get("percentile") or s.get("clat_ns", {}).get("percentile") or {}
    us = lambda k: pct[k] / 1000.0 if k in pct else None
    return {
        "iops": s["iops"],
        "mibps": s["bw_bytes"] / 1048576.0,
        "lat_mean": s["lat_ns"]["mean"] / 1000.0,
        "lat_p50": us("50.000000"),
        "lat_p99": us("99.000000"),
        "lat_p999": us("99.900000"),
    }


def parse_cpu(path, fio, hz, ncpu, is_gonvmf):
    """CPU in the sample window: the whole guest's busy time (wall time x vCPUs minus idle and
    iowait, which the kernel keeps exactly; its busy fields are tick samples that TCG loses
    under load) minus fio's own, per I/O; for gonvmf also its process's time per I/O. Process
    times are the scheduler's run time summed over the threads (schedstat, ns) where the
    samples have it, else utime+stime (ticks), split into user and system mode in the ratio
    of utime to stime where the samples have both. From the same samples: context switches per
    I/O (the guest's minus fio's threads'; gonvmf's threads') and gonvmf's system calls per
    I/O, in total and per call. Empty when no two samples fall inside fio's measured
    interval (then the numbers would mix in ramp or idle time)."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return {"cpu_note": "no CPU sample"}
    head = dict(zip(*[iter(lines[0].lstrip("# ").split())] * 2)) if lines and lines[0].startswith("#") else {}
    rows = [list(map(float, l.split()[:24])) for l in lines
            if l.strip() and not l.startswith(("#", "s ", "k ")) and len(l.split()) >= 12]
    calls = {}  # epoch (as float, like the rows') -> {name: count}
    wakes = {}  # epoch -> {waker: count}
    for l in lines:
        if l.startswith(("s ", "k ")):
            f = l.split()
            (calls if f[0] == "s" else wakes)[float(f[1])] = {
                k: float(v) for k, v in (x.rsplit(":", 1) for x in f[2:] if ":" in x)}
    if "go" not in head:
        return {"cpu_note": "incomplete CPU sample"}
    # fields: epoch uptime user nice system idle iowait irq softirq steal fio target
    #         [target_syscalls target_cs target_ns fio_cs fio_ns guest_ctxt [softirq_cs
    #         [target_wait softirq_wait fio_wait [target_utime target_stime]]]]
    # fio measures from go + ramp to go + ramp + runtime (go: its prerun hook, the job's start);
    # use the first and the last sample inside that, with a margin for fio's own start
    go, ramp, run = float(head["go"]), float(head.get("ramp", 0)), float(head.get("runtime", 0))
    inside = [r for r in rows if go + ramp + 0.3 <= r[0] <= go + ramp + run - 0.1]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < min(1.0, run / 3):
        return {"cpu_note": "no CPU samples spanning fio's measured interval (%d of %d inside)" % (len(inside), len(rows))}
    a, b = inside[0], inside[-1]
    delta = [y - x for x, y in zip(a, b)]
    iops = fio["iops"]
    dt = delta[1]  # uptime: /proc/uptime, read right after /proc/stat
    if dt <= 0 or not iops:
        return {"cpu_note": "empty CPU window"}
    ios = iops * dt
    capacity = dt * hz * ncpu  # ticks the vCPUs had in the window
    idle = delta[5] + delta[6]  # exact under NO_HZ, unlike the tick-sampled busy fields
    busy = min(max(capacity - idle, 0.0), capacity)
    sched = len(delta) >= 18  # schedstat run time and switches, syscalls, ctxt
    fio_t = delta[16] / 1e9 * hz if sched else delta[10]
    tgt = delta[14] / 1e9 * hz if sched else delta[11]
    out = {
        "cpu_window_s": dt,
        "guest_busy_pct": 100.0 * busy / capacity,
        "fio_cpu_pct": 100.0 * fio_t / capacity,
        "cpu_us_io": max(busy - fio_t, 0.0) / hz / ios * 1e6,
        "cpu_all_us_io": busy / hz / ios * 1e6,
    }
    if sched:
        out["cs_io"] = max(delta[17] - delta[15], 0.0) / ios
    if len(delta) >= 19:
        out["soft_cs_io"] = delta[18] / ios
    wa, wb = wakes.get(a[0]), wakes.get(b[0])
    if wa is not None and wb is not None:
        # wake-ups of ksoftirqd by kind of waking task (guest-bench.sh's wake_hist)
        out["soft_wakes"] = {k: max(v - wa.get(k, 0.0), 0.0) / ios for k, v in wb.items()}
        out["soft_wake_io"] = sum(out["soft_wakes"].values())
    waits = len(delta) >= 22  # run-queue waits (schedstat, ns)
    if waits:
        out["soft_wait_io"] = delta[20] / 1e3 / ios
        out["fio_wait_io"] = delta[21] / 1e3 / ios
    if is_gonvmf:
        out["proc_us_io"] = tgt / hz / ios * 1e6
        out["proc_pct"] = 100.0 * tgt / capacity
        if sched:
            out["proc_cs_io"] = delta[13] / ios
            ca, cb = calls.get(a[0]), calls.get(b[0])
            if ca is not None and cb is not None:
                out["sys_io"] = delta[12] / ios
                out["sys_calls"] = {k: (v - ca.get(k, 0.0)) / ios for k, v in cb.items() if v - ca.get(k, 0.0) > 0}
        if waits:
            out["proc_wait_io"] = delta[19] / 1e3 / ios
        # utime and stime split the process's time in the ratio of the ticks that found it
        # in user and in system mode (the kernel scales their sum to the run time)
        du, ds = (max(x, 0.0) for x in delta[22:24]) if len(delta) >= 24 else (0.0, 0.0)
        if du + ds > 0:
            out["proc_user_us_io"] = out["proc_us_io"] * du / (du + ds)
            out["proc_sys_us_io"] = out["proc_us_io"] * ds / (du + ds)
    return out


def parse_perftest(d):
    """perftest client outputs: r<rep>-<test>-<size>.txt -> {(test,size): [result dict per rep]}."""
    res = {}
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return res
    for n in names:
        m = re.match(r"r(\d+)-(ib_\w+?)-(\d+)\.txt$", n)
        if not m:
            continue
        lines = open(os.path.join(d, n), errors="replace").read().splitlines()
        head = None
        row = None
        for i, l in enumerate(lines):
            if l.strip().startswith("#bytes") and i + 1 < len(lines):
                head, row = l, lines[i + 1].split()
        if not row:
            continue
        r = {"rep": int(m.group(1))}
        if "lat" in m.group(2):
            keys = ("bytes", "iters", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p999")
        else:
            keys = ("bytes", "iters", "bw_peak", "bw_avg", "msg_rate")
            r["unit"] = "Gb/s" if "Gb/sec" in head else "MB/s"
        for k, v in zip(keys, row):
            r[k] = fnum(v)
        if "bw_avg" in r and not r.get("bw_avg"):
            r["bw_avg"] = r["msg_rate"] = None  # no completion inside perftest's measured window
        if "bw_avg" in r and r.get("bw_avg") is not None:
            # MiB/s of payload; perftest's MB/sec is 2^20 bytes, Gb/sec 10^9 bits
            r["mibps"] = r["bw_avg"] * 1e9 / 8 / 1048576 if r["unit"] == "Gb/s" else r["bw_avg"]
            r["kmsgs"] = r["msg_rate"] * 1000 if r.get("msg_rate") is not None else None
        res.setdefault((m.group(2), int(m.group(3))), []).append(r)
    return res


# ---------------------------------------------------------------- statistics


class Stat:
    """median and range of the repetitions' values."""

    def __init__(self, values):
        self.values = [v for v in values if v is not None]
        self.n = len(self.values)
        self.med = statistics.median(self.values) if self.values else None
        self.lo = min(self.values) if self.values else None
        self.hi = max(self.values) if self.values else None

    def spread_pct(self):
        if not self.n or not self.med:
            return None
        return 100.0 * (self.hi - self.lo) / self.med


def better_ratio(metric, k, g):
    """gonvmf relative to the kernel, >= 1 when gonvmf is better."""
    if k is None or g is None or k <= 0 or g <= 0:
        return None
    return g / k if METRICS[metric][2] else k / g


def summarize(d):
    by = {}
    for r in d["runs"]:
        if r.get("error"):
            continue
        by.setdefault((r["backend"], r["job"], r["target"]), []).append(r)
    cells = {}
    paired = {}
    for (be, job, tg), rs in by.items():
        for m in METRICS:
            cells[(be, job, tg, m)] = Stat([r.get(m) for r in rs])
    for be in BACKENDS:
        jobs = {j for (b, j, t) in by if b == be}
        for job in jobs:
            k = {r["rep"]: r for r in by.get((be, job, "kernel"), [])}
            g = {r["rep"]: r for r in by.get((be, job, "gonvmf"), [])}
            for m in METRICS:
                paired[(be, job, m)] = Stat([better_ratio(m, k[rep].get(m), g[rep].get(m)) for rep in k if rep in g])
    sweep = {}
    for (be, job, tg), rs in by.items():
        mm = re.match(r"randread-4k-qd(\d+)$", job)
        if mm:
            sweep.setdefault(be, {}).setdefault(int(mm.group(1)), {})[tg] = {
                m: cells[(be, job, tg, m)] for m in ("iops", "lat_p50", "lat_p99", "lat_mean")
            }
    scal = {}
    for r in d["scaling"]:
        scal.setdefault((r["target"], int(r["qps_requested"])), []).append(r)
    conn = {}
    for s in d["sessions"]:
        if s["status"] == "ok":
            conn.setdefault((s["backend"], s["target"]), []).append(s)
    js = {
        "commit": d["host"].get("git_commit"),
        "date": d["host"].get("date"),
        "gonvmf": d.get("gonvmf-status.txt"),
        "jobs": {},
    }
    for (be, job, tg, m), st in cells.items():
        if st.n:
            js["jobs"].setdefault("%s/%s" % (be, job), {}).setdefault(tg, {})[m] = {
                "median": st.med, "min": st.lo, "max": st.hi, "n": st.n}
    for (be, job, m), st in paired.items():
        if st.n and (be, job, "kernel", m) in cells:
            k = cells[(be, job, "kernel", m)].med
            g = cells.get((be, job, "gonvmf", m))
            js["jobs"]["%s/%s" % (be, job)].setdefault("ratio", {})[m] = better_ratio(m, k, g.med if g else None)
    return {"cells": cells, "paired": paired, "sweep": sweep, "scaling": scal, "connect": conn, "json": js}


# ---------------------------------------------------------------- formatting


def num(v, digits=None):
    if v is None:
        return "–"
    if digits is None:
        a = abs(v)
        digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    return "{:,.{}f}".format(v, digits)


def cell(st, digits=None):
    if st is None or not st.n:
        return "–"
    if st.n == 1:
        return num(st.med, digits)
    return "%s [%s–%s]" % (num(st.med, digits), num(st.lo, digits), num(st.hi, digits))


def ratio_cell(metric, k, g, paired):
    if k is None or g is None or not k.n or not g.n:
        return "–"
    r = better_ratio(metric, k.med, g.med)
    if r is None:
        return "–"
    s = "**%.2f**" % r if r < 1.0 else "%.2f" % r
    if paired is not None and paired.n > 1:
        s += " (%.2f–%.2f)" % (paired.lo, paired.hi)
    return s


def primary(job):
    return "mibps" if "128k" in job else "iops"


def job_title(job):
    m = re.match(r"(\w+)-(\w+)-qd(\d+)(?:-cpu(\d+))?$", job)
    if not m:
        return job
    t = "%s %s QD%s" % (m.group(1), m.group(2), m.group(3))
    return t + ", fio on vCPU %s" % m.group(4) if m.group(4) is not None else t


def gonvmf_state(d):
    st = d.get("gonvmf-status.txt", "")
    if st == "available":
        return True, "measured"
    if st.startswith("not measured"):
        return False, st
    if not st:
        # the guest did not finish; tell from the sessions
        bad = [s["reason"] for s in d["sessions"] if s["target"] == "gonvmf" and s["status"] != "ok"]
        ok = [s for s in d["sessions"] if s["target"] == "gonvmf" and s["status"] == "ok"]
        if ok:
            return True, "measured (partial run)"
        return False, bad[0] if bad else "no result (the guest run did not get to it; see raw/guest.log)"
    return False, "; ".join(l.replace("unavailable ", "", 1) for l in st.splitlines())


def render(out, d, s, plot_note):
    p, g, h = d["params"], d["guest"], d["host"]
    cells, paired = s["cells"], s["paired"]
    have_g, g_text = gonvmf_state(d)
    reps = p.get("REPS", "?")
    L = []
    w = L.append
    w("# gonvmf vs the Linux kernel target over Soft-RoCE")
    w("")
    w("Generated by `integration/bench/run.sh` (report: `integration/bench/report.py`). "
      "Both targets served the same Linux host (nvme-rdma) over the same rxe link inside **one guest boot**, "
      "with the same fio jobs and backend kinds, one target at a time, alternating.")
    w("")
    w("| | |")
    w("|---|---|")
    w("| date | %s |" % h.get("date", "?"))
    w("| commit | `%s` (%s) |" % (h.get("git_commit", "?")[:12], h.get("git_describe", "?")))
    w("| gonvmf | %s |" % (g_text if have_g else "**not available**: " + g_text))
    w("| guest | Linux %s, %s vCPUs (qemu TCG, `%s`), %s MiB; rxe MTU %s on a dummy netdev (MTU %s) |" % (
        g.get("kernel", "?"), g.get("vcpus", "?"), g.get("guest_cpu", "?"),
        int(fnum(g.get("guest_mem_kb")) or 0) // 1024, g.get("rxe_active_mtu", "?"), g.get("netdev_mtu", "?")))
    w("| host | %s × %s, Linux %s, %s; load average %s at the start, %s at the end |" % (
        h.get("host_cpus", "?"), h.get("host_cpu", "?"), h.get("host_kernel", "?"), h.get("qemu", "?"),
        h.get("host_load_start", "?"), h.get("host_load_end", "?")))
    w("| tools (Debian packages) | fio %s, nvme-cli %s, perftest %s, rdma-core %s |" % (
        g.get("fio", "?"), g.get("nvme-cli", g.get("nvme_cli", "?")), g.get("perftest", "?"), g.get("rdma-core", "?")))
    w("| settings | %s repetition(s); fio libaio, direct=1, time_based %s s + ramp %s s, norandommap, randrepeat=0, 1 job; "
      "the Linux host connects with its defaults (%s I/O queues of 128 entries) |" % (
          reps, p.get("RUNTIME", "?"), p.get("RAMP", "?"), p.get("NCPU", "?")))
    if p.get("GONVMF_TRANSPORT"):
        w("| gonvmf transport | `%s` |" % p["GONVMF_TRANSPORT"])
    w("| run | %s s wall on the host; guest status `%s` |" % (h.get("wall_seconds", "?"), d.get("vm_status") or "?"))
    w("")
    w("> **Read the ratios, not the absolute numbers.** The guest is emulated (TCG, ~50× slower than hardware) "
      "on a shared 2-core machine, so absolute IOPS and latencies say little about real hardware; the "
      "two targets ran alternately in the same boot, so their ratio does. Cells are the median over the "
      "repetitions with [min–max]. **Ratio columns are oriented so that ≥ 1.00 means gonvmf is better**: "
      "gonvmf/kernel for IOPS and bandwidth (higher is better), kernel/gonvmf for latency and CPU per I/O "
      "(lower is better). A ratio below 1.00 is in bold. In parentheses: the range of the per-repetition "
      "ratios (each repetition ran the two targets back to back).")
    w("")
    if d["errors"]:
        w("**Failed runs** (left out of the medians): " + "; ".join(d["errors"]))
        w("")
    if d["cpu_notes"]:
        w("**CPU samples left out** (no two samples inside fio's measured interval, e.g. because the guest stalled): " + "; ".join(d["cpu_notes"]))
        w("")
    status = d.get("vm_status") or ""
    if status and status != "exit 0":
        w("**The guest run did not complete cleanly (`%s`)**: the tables hold what was measured; see `raw/guest.log`." % status)
        w("")

    # ---- headline
    backends = [b for b in BACKENDS if any(k[0] == b for k in cells)]
    w("## Summary")
    w("")
    head = "| job | metric |"
    sep = "|---|---|"
    for be in backends:
        head += " %s: kernel | %s: gonvmf | %s: ratio |" % (be, be, be)
        sep += "---:|---:|---:|"
    w(head)
    w(sep)
    # the goal rows with what explains them, then the pinned 128k rows' throughput and CPU;
    # a metric nobody measured (no such job, or results from before its counter) is left out
    rows = [(job, m) for job in MAIN_JOBS
            for m in (primary(job), "sys_io", "proc_cs_io", "cs_io", "soft_cs_io", "soft_wake_io", "proc_wait_io",
                      "soft_wait_io", "fio_wait_io", "lat_p99" if job.endswith("qd1") is False else "lat_p50",
                      "cpu_us_io", "cpu_all_us_io")]
    rows += [(job, m) for job in PIN_JOBS for m in (primary(job), "cpu_us_io", "cpu_all_us_io")]
    for job, m in rows:
        label, unit, _ = METRICS[m]
        if not any(cells.get((be, job, tg, m)) and cells[(be, job, tg, m)].n for be in backends for tg in TARGETS):
            continue
        line = "| %s | %s%s |" % (job_title(job), label, " (%s)" % unit if unit else "")
        for be in backends:
            k, gg = cells.get((be, job, "kernel", m)), cells.get((be, job, "gonvmf", m))
            line += " %s | %s | %s |" % (num(k.med) if k and k.n else "–", num(gg.med) if gg and gg.n else "–",
                                        ratio_cell(m, k, gg, paired.get((be, job, m))) if m not in PROC_ONLY else "–")
        w(line)
    w("")
    if any(cells.get((be, job, tg, primary(job))) and cells[(be, job, tg, primary(job))].n
           for be in backends for job in PIN_JOBS for tg in TARGETS):
        w("The rows \"fio on vCPU 0\" repeat the 128k jobs with fio's thread pinned to vCPU 0 (`cpus_allowed=0`). "
          "The Linux host gives each CPU its own I/O queue, so there all of the job's I/O goes to one queue pair: "
          "they measure what one queue pair carries. Unpinned, fio's moves between the vCPUs decide how many of the "
          "host's queues carry the job at once, and those moves depend on where each target's work runs (the kernel "
          "target's in kernel threads and softirq, gonvmf's in its poll threads).")
        w("")
    if any(cells.get((be, job, "gonvmf", "sys_io")) and cells[(be, job, "gonvmf", "sys_io")].n for be in backends for job in MAIN_JOBS):
        w("System calls and context switches per I/O: see [Kernel crossings per I/O](#kernel-crossings-per-io) for how they "
          "are counted and which calls they are. The kernel target makes no system calls: it runs in kernel threads and "
          "softirq context.")
        w("")
    if not have_g:
        w("gonvmf's columns are empty: %s. The kernel target's numbers stand on their own as the baseline." % g_text)
        w("")
    vf = [x for x in d["sessions"] if x.get("verify") and not x["verify"].startswith("not run")]
    if vf:
        w("Data check before the timed jobs (first repetition, fio: `file` 32 MiB of random 4k–128k writes with crc32c "
          "checksums read back; `null` 32 MiB of random 4k–128k reads checked for zeroes): " +
          "; ".join("%s %s %s" % (x["backend"], x["target"], "ok" if x["verify"] == "ok" else "**failed**: " + x["verify"]) for x in vf) + ".")
        w("")

    # ---- per backend details
    w("## Throughput, latency and CPU per job")
    w("")
    for be in backends:
        w("### Backend `%s`" % be)
        w("")
        w(BACKEND_TEXT[be])
        w("")
        w("| job | metric | kernel | gonvmf | ratio (≥1: gonvmf better) |")
        w("|---|---|---:|---:|---:|")
        jobs = sorted({k[1] for k in cells if k[0] == be}, key=job_order)
        for job in jobs:
            for m in METRICS:
                if m in PROC_ONLY and not have_g:
                    continue
                k, gg = cells.get((be, job, "kernel", m)), cells.get((be, job, "gonvmf", m))
                if (not k or not k.n) and (not gg or not gg.n):
                    continue
                label, unit, hib = METRICS[m]
                w("| %s | %s%s, %s |%s | %s | %s |" % (
                    job_title(job), label, " (%s)" % unit if unit else "", "higher is better" if hib else "lower is better",
                    " " + cell(k) if m not in PROC_ONLY else " –", cell(gg),
                    ratio_cell(m, k, gg, paired.get((be, job, m))) if m not in PROC_ONLY else "–"))
        w("")

    # ---- sweep
    w("## Queue-depth sweep: 4k random read")
    w("")
    if plot_note is None:
        w("![IOPS and latency against queue depth](iops-vs-qd.png)")
        w("")
        w("Median IOPS (left) and median p50 latency (right) against fio's iodepth, with min–max bars; "
          "solid lines: null backend, dashed: file. Data and gnuplot script: `plot/`.")
    else:
        w("No plot: %s." % plot_note)
    w("")
    for be in backends:
        sw = s["sweep"].get(be)
        if not sw:
            continue
        w("`%s` backend:" % be)
        w("")
        w("| QD | kernel IOPS | gonvmf IOPS | ratio | kernel p50 µs | gonvmf p50 µs | ratio | kernel p99 µs | gonvmf p99 µs | ratio |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for qd in sorted(sw):
            k, gg = sw[qd].get("kernel", {}), sw[qd].get("gonvmf", {})
            job = "randread-4k-qd%d" % qd
            row = "| %d |" % qd
            for m in ("iops", "lat_p50", "lat_p99"):
                row += " %s | %s | %s |" % (cell(k.get(m)), cell(gg.get(m)), ratio_cell(m, k.get(m), gg.get(m), paired.get((be, job, m))))
            w(row)
        w("")
    w("The Linux host's I/O queues hold 128 entries (127 usable), so QD128 from one fio job is capped there by the host, for both targets.")
    w("")

    # ---- CPU
    w("## Target CPU per I/O")
    w("")
    w("Measured between the first and the last of the samples that fall inside the job's measured interval (after "
      "the ramp): a SCHED_FIFO sampler woken by fio's `exec_prerun` hook when the job's I/O starts samples twice, 0.5 s "
      "after the ramp and 0.3 s before the end (a sample holds one vCPU for 15–50 ms, and a userspace target's polling "
      "thread waits for it, so only the two the window needs are taken). "
      "Jobs without two such samples are left out and listed at the top. From the guest's `/proc/stat`:")
    w("")
    w("- **all but fio** (both targets, the ratio above): the guest's busy CPU time in the window (wall time × vCPUs "
      "minus the idle and iowait time of `/proc/stat`, which the kernel keeps exactly; its user/system/softirq fields are "
      "tick samples, and TCG on a loaded machine loses most ticks) minus fio's own run time (the scheduler's, summed over "
      "its threads: `/proc/PID/task/*/schedstat`, exact; utime+stime in runs from before that was sampled), "
      "divided by the I/Os in the window. The kernel target runs in kernel threads and softirq context and has no process of its own, so this is the "
      "one method that applies to both. It also contains the Linux host's completion path (nvme-rdma, blk-mq softirq), "
      "Soft-RoCE's packet processing for both ends (rxe tasklets) and background noise. That work is the same for both "
      "targets (the same functions run the same number of times per I/O), but not where it runs: a userspace target's "
      "posts make the softirq threads switch in and out for it (see [Kernel crossings per I/O](#kernel-crossings-per-io)), "
      "which this column charges to gonvmf.")
    w("- **gonvmf process**: the scheduler's run time of the gonvmf process's threads (`/proc/PID/task/*/schedstat`) per "
      "I/O. Soft-RoCE work that its verbs calls trigger runs partly in its system calls (counted: rxe runs a userspace "
      "post's send processing, and often the receiving side's, inside the call) and partly in softirq. Split into "
      "**user mode** (gonvmf's own code: commands, polling and the spin between bursts) and **system mode** (its "
      "system calls, Soft-RoCE's work in them included) in the ratio of the process's utime to its stime "
      "(`/proc/PID/stat`): the kernel scales their sum to the exact run time and splits it as the clock ticks found "
      "the process, so the split is a sample (a few hundred ticks per window), the sum is not.")
    w("- fio's submission path (the host's nvme-rdma driver and rxe's send side, run in fio's system calls) is fio's time "
      "and is not counted for either target. A busy-polling target burns CPU whether or not I/O arrives; that is counted.")
    w("- **whole guest** (both targets): the guest's busy CPU time per I/O, fio included. *All but fio* undercounts a "
      "target whose work runs in softirq context while fio's thread is the one running: without "
      "`CONFIG_IRQ_TIME_ACCOUNTING` (Debian's kernels) the kernel charges that softirq time to the interrupted task, "
      "fio, whose run time is then subtracted. That is the kernel target's case wherever fio shares a vCPU with its "
      "work (fio's share of the CPU, in the table below, is then well above its share beside gonvmf); gonvmf's work runs "
      "in its own threads. Both targets serve the same fio, so the whole guest's CPU compares them without that bias, "
      "at the price of fio's own share.")
    w("")
    w("| backend | job | guest busy % (kernel / gonvmf) | fio % (kernel / gonvmf) | gonvmf process % | gonvmf µs per I/O: user / system |")
    w("|---|---|---:|---:|---:|---:|")
    for be in backends:
        # the summary's jobs, then the sweep's other depths: where the guest saturates shows there
        jobs = sorted({r["job"] for r in d["runs"] if r["backend"] == be and r.get("guest_busy_pct") is not None},
                      key=job_order)
        for job in jobs:
            parts = []
            for m in ("guest_busy_pct", "fio_cpu_pct"):
                kv = Stat([r.get(m) for r in d["runs"] if r["backend"] == be and r["job"] == job and r["target"] == "kernel"])
                gv = Stat([r.get(m) for r in d["runs"] if r["backend"] == be and r["job"] == job and r["target"] == "gonvmf"])
                parts.append("%s / %s" % (num(kv.med, 1), num(gv.med, 1)))
            pv = Stat([r.get("proc_pct") for r in d["runs"] if r["backend"] == be and r["job"] == job and r["target"] == "gonvmf"])
            u, sy = cells.get((be, job, "gonvmf", "proc_user_us_io")), cells.get((be, job, "gonvmf", "proc_sys_us_io"))
            split = "%s / %s" % (num(u.med), num(sy.med)) if u and u.n and sy and sy.n else "–"
            w("| %s | %s | %s | %s | %s |" % (be, job_title(job), " | ".join(parts), num(pv.med, 1), split))
    w("")
    w("Percentages are of all %s vCPUs. The summary's jobs come first, then the 4k random-read sweep's other depths, "
      "which show where the guest's CPUs saturate." % p.get("NCPU", "?"))
    w("")

    # ---- kernel crossings
    crossings(w, d, cells, paired, backends)

    # ---- perftest
    w("## The link's ceiling: perftest over rxe0")
    w("")
    pt = d["perftest"]
    if not pt:
        w("perftest was not run (`--perftest 0`) or produced nothing.")
    else:
        w("Client and server in the same guest, one RC QP through rdma_cm, the server started 2 s before the client; "
          "bandwidth is perftest's average (its peak reads 0 under TCG). Median [min–max] over the repetitions.")
        w("")
        w("| test | size | MiB/s | k messages/s | latency typical / avg / p99 µs | runs measured |")
        w("|---|---:|---:|---:|---:|---:|")
        for (t, sz) in sorted(pt):
            rs = pt[(t, sz)]
            if "lat" in t:
                ty, av, p99 = (Stat([r.get(k) for r in rs]) for k in ("t_typical", "t_avg", "p99"))
                lat = "%s / %s / %s" % (cell(ty), cell(av), cell(p99)) if ty.n else "n/a (perftest measured no clock; see raw/perftest)"
                w("| %s | %d | | | %s | %d of %d |" % (t, sz, lat, ty.n, len(rs)))
            else:
                bw = Stat([r.get("mibps") for r in rs])
                w("| %s | %d | %s | %s | | %d of %d |" % (t, sz, cell(bw) if bw.n else "n/a", cell(Stat([r.get("kmsgs") for r in rs])) if bw.n else "n/a",
                                                        bw.n, len(rs)))
        w("")
        w("A run that measured nothing (perftest's average reads 0: no completion inside its measured window, which "
          "happens under TCG when the machine is loaded) or no clock (`inf`) is left out.")
        w("")
        ceil = []
        for job, (t, sz), m, conv in (("randread-4k-qd32", ("ib_write_bw", 4096), "iops", "kmsgs"),
                                      ("read-128k-qd16", ("ib_write_bw", 131072), "mibps", "mibps"),
                                      ("write-128k-qd16", ("ib_read_bw", 131072), "mibps", "mibps")):
            lim = Stat([r.get(conv) for r in pt.get((t, sz), [])])
            if not lim.n or not lim.med:
                continue
            lm = lim.med * (1000 if conv == "kmsgs" else 1)
            for be in backends:
                k, gg = cells.get((be, job, "kernel", m)), cells.get((be, job, "gonvmf", m))
                ceil.append("| %s | %s | %s %d | %s | %s | %s |" % (
                    job_title(job), be, t, sz, num(lm),
                    "%.0f %%" % (100 * k.med / lm) if k and k.n else "–",
                    "%.0f %%" % (100 * gg.med / lm) if gg and gg.n else "–"))
        if ceil:
            w("Share of the ceiling reached, perftest with as many messages in flight as fio has I/Os (a read moves its data "
              "with an RDMA Write from the target, a write with an RDMA Read; a 4k read also costs two sends, so 100 % is out "
              "of reach). Above 100 % perftest is no ceiling: under TCG it suffers from the emulated CPU as much as the targets "
              "do, and from the machine's load at the moment it ran.")
            w("")
            w("| job | backend | ceiling | value | kernel | gonvmf |")
            w("|---|---|---|---:|---:|---:|")
            for l in ceil:
                w(l)
            w("")

    # ---- connect and scaling
    w("## Connecting and scaling")
    w("")
    conn = s["connect"]
    if conn:
        w("Time from `nvme connect` to the namespace's block device (one controller with the host's default %s I/O queues), "
          "every session:" % p.get("NCPU", "?"))
        w("")
        w("| backend | kernel s | gonvmf s | ratio | I/O queues granted (kernel / gonvmf) | queue entries | LBA bytes |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        for be in backends:
            ks, gs = conn.get((be, "kernel"), []), conn.get((be, "gonvmf"), [])
            kc, gc = Stat([fnum(x["connect_s"]) for x in ks]), Stat([fnum(x["connect_s"]) for x in gs])
            rat = better_ratio("lat_mean", kc.med, gc.med)
            q = "%s / %s" % (ks[0]["io_queues"] if ks else "–", gs[0]["io_queues"] if gs else "–")
            qs = "%s / %s" % (ks[0]["queue_size"] if ks else "–", gs[0]["queue_size"] if gs else "–")
            lba = "%s / %s" % (ks[0]["lba_bytes"] if ks else "–", gs[0]["lba_bytes"] if gs else "–")
            w("| %s | %s | %s | %s | %s | %s | %s |" % (be, cell(kc, 2), cell(gc, 2), "%.2f" % rat if rat else "–", q, qs, lba))
        w("")
        rss = [(fnum(x["gonvmf_rss_start_kb"]), fnum(x["gonvmf_rss_connected_kb"]), fnum(x["gonvmf_rss_end_kb"]), fnum(x["gonvmf_hwm_end_kb"]))
               for be in backends for x in conn.get((be, "gonvmf"), [])]
        if rss:
            st = [Stat([r[i] for r in rss]) for i in range(4)]
            w("gonvmf's resident memory (VmRSS, MiB; median [min–max] over sessions): %s at start, %s connected, %s after the fio jobs; peak (VmHWM) %s." % tuple(
                cell(Stat([v / 1024 for v in x.values]), 1) for x in st))
            w("")
    sc = s["scaling"]
    if sc:
        w("Scaling: N I/O queue pairs. The Linux host grants at most one I/O queue per online CPU and controller "
          "(`nvme connect -i` is capped by the %s vCPUs), so N queue pairs are ceil(N/%s) controllers of min(N, %s) I/O queues, "
          "each connected from its own host NQN, one after the other (each also has an admin queue). "
          "Times from the first `nvme connect` to the last controller's namespace; memory after all are connected "
          "(guest used = MemTotal − MemAvailable, which includes the Linux host's side and, for the kernel target, "
          "the target itself). Median [min–max] over the repetitions." % (p.get("NCPU", "?"), p.get("NCPU", "?"), p.get("NCPU", "?")))
        w("")
        w("| QPs | target | controllers × I/O queues | granted | connect all s | per controller s (median) | disconnect s | gonvmf RSS MiB before → after | guest used Δ MiB | slab Δ MiB | status |")
        w("|---:|---|---|---:|---:|---:|---:|---|---:|---:|---|")
        for (tg, n) in sorted(sc, key=lambda x: (x[1], TARGETS.index(x[0]) if x[0] in TARGETS else 9)):
            rs = sc[(tg, n)]
            okr = [r for r in rs if r["status"] == "ok"]
            stt = "ok" if len(okr) == len(rs) else "; ".join(sorted({r["status"] for r in rs if r["status"] != "ok"}))
            if not okr:
                w("| %d | %s | | | | | | | | | %s |" % (n, tg, stt))
                continue
            f = lambda k, scale=1.0: Stat([fnum(r[k]) / scale if fnum(r[k]) is not None else None for r in okr])
            rb, ra = f("gonvmf_rss_before_kb", 1024), f("gonvmf_rss_after_kb", 1024)
            w("| %d | %s | %s × %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                n, tg, okr[0]["controllers"], okr[0]["io_queues_per_ctrl_requested"], cell(f("io_queues_granted"), 0),
                cell(f("connect_total_s"), 2), cell(f("connect_median_s"), 2), cell(f("disconnect_s"), 2),
                "%s → %s" % (num(rb.med, 1), num(ra.med, 1)) if rb.n else "–",
                cell(f("guest_used_delta_kb", 1024), 1), cell(f("slab_delta_kb", 1024), 1), stt))
        w("")
        ratios = []
        for n in sorted({n for (_, n) in sc}):
            k = Stat([fnum(r["connect_total_s"]) for r in sc.get(("kernel", n), []) if r["status"] == "ok"])
            gg = Stat([fnum(r["connect_total_s"]) for r in sc.get(("gonvmf", n), []) if r["status"] == "ok"])
            r = better_ratio("lat_mean", k.med, gg.med)
            if r:
                ratios.append("%d QPs %.2f" % (n, r))
        if ratios:
            w("Connect-time ratio kernel/gonvmf (≥ 1: gonvmf connects faster): " + ", ".join(ratios) + ".")
            w("")

    # ---- method
    w("## Method and caveats")
    w("")
    w("- One guest boot: Soft-RoCE (rxe0 on dummy0, %s), the Linux host (nvme-rdma) and each target in the same guest. "
      "For each repetition: perftest, then for each backend both targets one after the other (the order flips every "
      "repetition): set up the target, `nvme connect` (timed), every fio job, `nvme disconnect`, tear down. Then the "
      "scaling test, targets in the same order." % g.get("rxe_active_mtu", "?"))
    w("- Kernel target: nvmet + nvmet-rdma through configfs, port defaults (4 KiB in-capsule data, queue size from the host). "
      "gonvmf: `gonvmf serve --config` with the generated `raw/gonvmf/<backend>.yaml` (gonvmf's transport defaults%s)." % (
          ", plus `%s`" % p["GONVMF_TRANSPORT"] if p.get("GONVMF_TRANSPORT") else ""))
    w("- fio runs on the host's multipath head device (`/dev/nvmeXnY`), one job, libaio; latency percentiles are fio's "
      "`lat` (submission + completion). Jobs titled \"fio on vCPU N\" pin fio's thread to that vCPU, hence to one of "
      "the host's I/O queues.")
    w("- Noise: other work on the build machine slows the guest unevenly; alternating the targets and taking medians "
      "spreads it over both. Compare the spread columns with the ratio before believing a difference under ~10 %.")
    w("- File backend: the host caches the guest's disk image, so the file backend measures the targets' file I/O "
      "path (O_DIRECT in the guest), not a disk.")
    w("")

    # ---- raw
    w("## Raw data")
    w("")
    files = lambda sub: sorted(os.listdir(os.path.join(d["raw"], sub))) if os.path.isdir(os.path.join(d["raw"], sub)) else []
    w("In `raw/` next to this report (not kept with the example in the repository):")
    w("")
    w("- `fio/` — %d fio JSON outputs, one per session (`r<rep>-<backend>-<target>.json`), with their job files and logs" % len([x for x in files("fio") if x.endswith(".json")]))
    w("- `cpu/` — %d CPU sample files, one per job (epoch, uptime, /proc/stat cpu fields, fio ticks, target ticks)" % len(files("cpu")))
    w("- `perftest/` — %d perftest outputs (client and server)" % len(files("perftest")))
    w("- `runs.tsv`, `sessions.tsv`, `scaling.tsv` — the index of every run; `params.env` — the settings")
    w("- `gonvmf/` — generated configs and `gonvmf serve` logs; `meta/` — guest facts, `nvme id-ctrl` of each target")
    w("- `guest.log`, `console.log`, `dmesg.txt` — the guest; `host/` — host facts and the gonvmf build log")
    w("")
    return "\n".join(L) + "\n"


def crossings(w, d, cells, paired, backends):
    """The section on system calls and context switches per I/O."""
    have = [(be, job) for be in backends for job in MAIN_JOBS
            if cells.get((be, job, "gonvmf", "sys_io")) and cells[(be, job, "gonvmf", "sys_io")].n]
    have_cs = any(cells.get((be, job, tg, "cs_io")) and cells[(be, job, tg, "cs_io")].n
                  for be in backends for job in MAIN_JOBS for tg in TARGETS)
    have_wait = any(cells.get((be, job, tg, "soft_wait_io")) and cells[(be, job, tg, "soft_wait_io")].n
                    for be in backends for job in MAIN_JOBS for tg in TARGETS)
    wake_jobs = sorted({(r["backend"], r["job"]) for r in d["runs"] if r.get("soft_wakes") is not None and r["backend"] in backends},
                       key=lambda x: (backends.index(x[0]), job_order(x[1])))
    if not have and not have_cs:
        return
    w("## Kernel crossings per I/O")
    w("")
    w("Counted in the guest over the same window as the CPU time (the first and the last sample inside fio's measured "
      "interval), divided by the I/Os fio completed in it:")
    w("")
    w("- **system calls, gonvmf process**: a histogram trigger on the `raw_syscalls:sys_enter` tracepoint "
      "(`hist:keys=id.syscall:vals=hitcount if comm == \"gonvmf\"` in tracefs) counts, inside the kernel, every system "
      "call of gonvmf's threads by call number, and the sampler reads the counters. No BPF (the 6.1 guest's tools have "
      "none to spare), no perf (its samples are lost while a TCG vCPU is busy, so they over-count idle time), no strace "
      "(it stops the process at every call, which would be the measurement). The trigger is on for the whole run, so the "
      "tracepoint's cost per system call, fio's included, is the same for both targets. The kernel target makes none.")
    w("- **context switches, all but fio**: the guest's context switches (`ctxt` of `/proc/stat`) minus those of fio's "
      "threads, for both targets: the kernel target's are its kernel threads' and softirq threads' switches, gonvmf's "
      "include its own and the kernel threads its calls wake. Both include the Linux host's completion path.")
    w("- **context switches, gonvmf process**: how often its threads were switched in (the third field of "
      "`/proc/PID/task/*/schedstat`, summed over the threads).")
    w("- **context switches, softirq threads**: the same for the guest's `ksoftirqd/N` threads, for both targets (part "
      "of *all but fio*). Soft-RoCE's packet work and the Linux host's completions run as softirqs (tasklets). One "
      "raised inside a softirq runs in the same pass; one raised outside interrupt context wakes ksoftirqd (a switch in "
      "and one out) unless it is running already." + (" Where they come from: *softirq-thread wake-ups*, below." if wake_jobs else ""))
    if wake_jobs:
        w("- **softirq-thread wake-ups**: how often `ksoftirqd/N` was woken, for both targets, counted inside the kernel "
          "by a histogram trigger on `sched:sched_wakeup` keyed by the waking task (`hist:keys=common_pid.execname if "
          "comm ~ \"ksoftirqd*\"`), by kind of waker: **fio** (the Linux host's I/O path, run in fio's system calls; "
          "Soft-RoCE on 6.1 sends a kernel post from a tasklet, so every command the host posts raises one), **gonvmf** "
          "(its threads: its post system calls, in which Soft-RoCE sends and, on the loopback link, receives, completing "
          "the host's commands), **kworker** (workqueues: the kernel target's command work), **other**. A wake-up from an "
          "interrupt's exit counts for the task the interrupt found running. A raise wakes ksoftirqd only if it is "
          "asleep: where the target's work is softirq work (the kernel target's) ksoftirqd is mostly running already, "
          "and the same raises wake nothing.")
    if have_wait:
        w("- **run-queue wait**: the time threads were runnable but waited for a vCPU (the second field of "
          "`/proc/PID/task/*/schedstat`, exact), summed over gonvmf's threads, over the `ksoftirqd/N` threads (both "
          "targets) and over fio's threads (both targets), per I/O. Time a thread waits is latency the I/O it carries "
          "does not spend running: on 2 vCPUs shared by fio, the softirq threads and a userspace target, it shows how "
          "much of a row's latency is contention for the CPUs rather than work.")
    w("")
    if have:
        w("gonvmf's system calls per I/O by call (median over the repetitions; calls under 0.01 per I/O left out):")
        w("")
        w("| backend | job | all | by call |")
        w("|---|---|---:|---|")
        for be, job in have:
            runs = [r for r in d["runs"] if r["backend"] == be and r["job"] == job and r["target"] == "gonvmf" and r.get("sys_calls")]
            w("| %s | %s | %s | %s |" % (be, job_title(job), num(cells[(be, job, "gonvmf", "sys_io")].med, 2), by_name(runs, "sys_calls")))
        w("")
    if wake_jobs:
        w("Softirq-thread wake-ups per I/O by waker (median over the repetitions; wakers under 0.01 per I/O left out):")
        w("")
        w("| backend | job | kernel: all | kernel: by waker | gonvmf: all | gonvmf: by waker |")
        w("|---|---|---:|---|---:|---|")
        for be, job in wake_jobs:
            line = "| %s | %s |" % (be, job_title(job))
            for tg in TARGETS:
                runs = [r for r in d["runs"] if r["backend"] == be and r["job"] == job and r["target"] == tg
                        and r.get("soft_wakes") is not None]
                st = cells.get((be, job, tg, "soft_wake_io"))
                line += " %s | %s |" % (num(st.med, 2) if st and st.n else "–", by_name(runs, "soft_wakes") or "–")
            w(line)
        w("")


def by_name(runs, field):
    """'name value, ...' from the runs' per-I/O counts by name (run[field]): the median over
    the runs (0 where a run has no such name), largest first, those under 0.01 left out."""
    names = sorted({k for r in runs for k in r[field]})
    med = {k: Stat([r[field].get(k, 0.0) for r in runs]).med for k in names}
    return ", ".join("%s %s" % (k, num(v, 2)) for k, v in sorted(med.items(), key=lambda x: (-x[1], x[0])) if v >= 0.01)


def job_order(job):
    if job in MAIN_JOBS:
        return (0, MAIN_JOBS.index(job), 0)
    if job in PIN_JOBS:
        return (0, len(MAIN_JOBS) + PIN_JOBS.index(job), 0)
    m = re.match(r"randread-4k-qd(\d+)$", job)
    return (1, 0, int(m.group(1))) if m else (2, 0, 0)


# ---------------------------------------------------------------- plot


def plot(out, d, s):
    """Writes plot/sweep.dat and plot/sweep.gp and runs gnuplot; None on success, else why not."""
    sweep = s["sweep"]
    series = []  # (backend, target)
    for be in BACKENDS:
        for tg in TARGETS:
            if any(tg in v for v in sweep.get(be, {}).values()):
                series.append((be, tg))
    if not series:
        return "no queue-depth sweep results"
    pd = os.path.join(out, "plot")
    os.makedirs(pd, exist_ok=True)
    qds = sorted({q for be in sweep for q in sweep[be]})
    with open(os.path.join(pd, "sweep.dat"), "w") as f:
        f.write("# 4k randread queue-depth sweep: per series median min max of IOPS, then of p50 latency (us)\n")
        f.write("# qd " + " ".join("%s_%s_iops_{med,min,max} %s_%s_p50_{med,min,max}" % (be, tg, be, tg) for be, tg in series) + "\n")
        for q in qds:
            row = [str(q)]
            for be, tg in series:
                c = sweep.get(be, {}).get(q, {}).get(tg)
                for m in ("iops", "lat_p50"):
                    st = c.get(m) if c else None
                    row += ["%.3f" % v if v is not None else "NaN" for v in ((st.med, st.lo, st.hi) if st and st.n else (None, None, None))]
            f.write(" ".join(row) + "\n")
    color = {"kernel": "#1f5fbf", "gonvmf": "#d62728"}
    dash = {"null": 1, "file": 2}
    gp = []
    gp.append("# generated by integration/bench/report.py; run from this directory: gnuplot sweep.gp")
    gp.append("set terminal pngcairo size 1400,600 font 'DejaVu Sans,11' noenhanced")
    gp.append("set output '../iops-vs-qd.png'")
    gp.append("set datafile missing 'NaN'")
    gp.append("set logscale x 2")
    gp.append("set xrange [%g:%g]" % (qds[0] / 1.3, qds[-1] * 1.3))
    gp.append("set xtics (%s)" % ", ".join('"%d" %d' % (q, q) for q in qds))
    gp.append("set grid")
    gp.append("set key below horizontal maxrows 2 box spacing 1.2")
    gp.append("set bmargin 7")
    gp.append("set multiplot layout 1,2 title '4k random read, one fio job: gonvmf vs Linux nvmet-rdma (%s, %s rep.; median, min-max bars)'" % (
        d["host"].get("git_describe", "?"), d["params"].get("REPS", "?")))
    for i, (m, title, ylab) in enumerate((("iops", "IOPS vs queue depth", "IOPS"),
                                          ("lat_p50", "p50 latency vs queue depth", "latency p50 (µs)"))):
        gp.append("set title '%s'" % title)
        gp.append("set xlabel 'iodepth'")
        gp.append("set ylabel '%s'" % ylab)
        gp.append("set yrange [0:*]; set format y '%g'" if m == "iops" else "set logscale y 10; set yrange [*:*]; set format y '%.0f'")
        plots = []
        for j, (be, tg) in enumerate(series):
            base = 2 + j * 6 + (0 if m == "iops" else 3)
            name = "%s, %s backend" % ("gonvmf" if tg == "gonvmf" else "Linux nvmet", be)
            plots.append("'sweep.dat' using 1:%d:%d:%d with yerrorlines lw 2 dt %d pt %d lc rgb '%s' title '%s'" % (
                base, base + 1, base + 2, dash[be], 7 if be == "null" else 5, color[tg], name))
        gp.append("plot " + ", \\\n     ".join(plots))
        if m != "iops":
            gp.append("unset logscale y")
    gp.append("unset multiplot")
    with open(os.path.join(pd, "sweep.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    if not shutil.which("gnuplot"):
        return "gnuplot is not installed (apt-get install gnuplot-nox); data and script are in plot/"
    r = subprocess.run(["gnuplot", "sweep.gp"], cwd=pd, capture_output=True, text=True)
    if r.returncode != 0:
        return "gnuplot failed: %s" % (r.stderr.strip().splitlines() or ["?"])[-1]
    return None


if __name__ == "__main__":
    main()
