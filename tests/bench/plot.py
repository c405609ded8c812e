#!/usr/bin/env python3
"""Plot benchmark results as PNG files (matplotlib).

Reads the JSON that bench.py --json and handoff.py --json write, or a
file of several such runs ({"runs": [...]}, as docs/bench/results.json,
which holds the figures quoted in docs/benchmarks.md). Writes:

  cycle.png       uncontended lock cycle: time per cycle relative to the
                  hiredis floor of the same run (one panel per bench.py run)
  handoff.png     handoff latency p50 and p99 per contestant (log scale)
  contention.png  contended acquisitions per second and fairness (fewest /
                  mean acquisitions of a worker)

Only the files whose runs are given are written. The documentation build
calls render() (docs/hooks.py); by hand:

    python3 tests/bench/plot.py [-o OUT_DIR] RESULTS.json [MORE.json ...]
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

PEERS = {"redis_py", "python_redis_lock", "pottery"}
COLORS = {"floor": "#9e9e9e", "hilock": "#1f77b4", "peer": "#ff7f0e"}


def load(paths: List[Path]) -> List[Dict[str, Any]]:
    """Every run in the files, each tagged with its "benchmark"."""
    runs: List[Dict[str, Any]] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        for run in data.get("runs", [data]):
            if "benchmark" not in run:
                first = (run.get("contestants") or [{}])[0]
                run = dict(run, benchmark="handoff.py" if "handoff" in first else "bench.py")
            runs.append(run)
    return runs


def kind(key: str) -> str:
    if key == "floor":
        return "floor"
    return "peer" if key in PEERS else "hilock"


def unique_labels(cs: List[Dict[str, Any]]) -> List[str]:
    labels = [c["label"] for c in cs]
    return [f"{l} [{c['key']}]" if labels.count(l) > 1 else l for l, c in zip(labels, cs)]


def run_title(run: Dict[str, Any]) -> str:
    if run.get("title"):
        return run["title"]
    return "pinned (--pin %s)" % run["pin"] if run.get("pin") is not None else "unpinned"


def cycle_figure(runs: List[Dict[str, Any]]) -> Any:
    import matplotlib.pyplot as plt
    n = len(runs)
    fig, axes = plt.subplots(n, 1, figsize=(8.5, 4.6 * n), squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        cs = [c for c in run["contestants"] if c.get("cycles_per_s")]
        floor = next((c["cycles_per_s"] for c in cs if c["key"] == "floor"), None)
        if floor is None:
            raise ValueError(f"{run_title(run)}: no floor contestant to compare with")
        ratio = [floor / c["cycles_per_s"] for c in cs]
        y = list(range(len(cs)))
        ax.barh(y, ratio, color=[COLORS[kind(c["key"])] for c in cs])
        ax.axvline(1.0, color="#555555", linewidth=0.8)
        for yi, r in zip(y, ratio):
            ax.text(r, yi, f" {r:.2f}x", va="center", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels(unique_labels(cs), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, max(ratio) * 1.2)
        ax.set_xlabel("time per cycle ÷ floor's (lower is faster)")
        ax.set_title(run_title(run), fontsize=10)
    fig.suptitle("Time per cycle (try_acquire + release) relative to the floor of the "
                 "same run", fontsize=11)
    fig.tight_layout()
    return fig


def handoff_figure(run: Dict[str, Any]) -> Any:
    import matplotlib.pyplot as plt
    cs = [c for c in run["contestants"] if (c.get("handoff") or {}).get("p50_us")]
    fig, ax = plt.subplots(figsize=(8.5, 0.45 * len(cs) + 1.6))
    y = list(range(len(cs)))
    p50 = [c["handoff"]["p50_us"] for c in cs]
    p99 = [c["handoff"].get("p99_us") or 0 for c in cs]
    ax.barh([v + 0.2 for v in y], p99, height=0.4, color="#aec7e8", label="p99")
    ax.barh([v - 0.2 for v in y], p50, height=0.4,
            color=[COLORS[kind(c["key"])] for c in cs], label="p50")
    for yi, a, b in zip(y, p50, p99):
        ax.text(a, yi - 0.2, f" {a:,.0f}", va="center", fontsize=8)
        if b:
            ax.text(b, yi + 0.2, f" {b:,.0f}", va="center", fontsize=8)
    ax.set_xscale("log")
    ping = (run.get("ping_p50_us") or {}).get("hiredis")
    ax.set_xlim(min(p50 + ([ping] if ping else [])) / 2, max(p99 + p50) * 4)
    ax.set_yticks(y)
    ax.set_yticklabels(unique_labels(cs), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("µs from the holder's release() to the waiter's acquire() returning (log)")
    if ping:
        ax.axvline(ping, color="#555555", linewidth=0.8, linestyle=":")
        ax.text(ping, len(cs) - 0.5, f" hiredis PING p50 {ping:g} µs", fontsize=7,
                va="center")
    ax.legend(loc="upper right", fontsize=8)
    n = run.get("samples")
    ax.set_title("Handoff latency" + (f" ({n} samples each)" if n else ""), fontsize=10)
    fig.tight_layout()
    return fig


def contention_figure(run: Dict[str, Any]) -> Any:
    import matplotlib.pyplot as plt
    cs = [c for c in run["contestants"] if (c.get("contention") or {}).get("counts")]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 0.45 * len(cs) + 1.8), sharey=True,
                                 gridspec_kw={"width_ratios": [3, 2]})
    y = list(range(len(cs)))
    for yi, c in zip(y, cs):
        counts = c["contention"]["counts"]
        a1.scatter(counts, [yi] * len(counts), s=14, color=COLORS[kind(c["key"])],
                   alpha=0.8)
        per_s = c["contention"].get("per_s")
        if per_s:
            a1.text(max(counts), yi, f"  {per_s:,.0f}/s", va="center", fontsize=8)
    a1.set_yticks(y)
    a1.set_yticklabels(unique_labels(cs), fontsize=8)
    a1.invert_yaxis()
    a1.set_xlim(0, max(max(c["contention"]["counts"]) for c in cs) * 1.25)
    workers = run.get("workers") or len(cs[0]["contention"]["counts"])
    seconds = run.get("seconds")
    a1.set_xlabel(f"acquisitions per worker ({workers} workers"
                  + (f", {seconds:g} s" if seconds else "") + "); label: acquisitions/s")
    fair = [c["contention"].get("fairness") or 0 for c in cs]
    a2.barh(y, fair, color=[COLORS[kind(c["key"])] for c in cs])
    for yi, f in zip(y, fair):
        a2.text(f, yi, f" {f:.2f}", va="center", fontsize=8)
    a2.set_xlim(0, 1.2)
    a2.set_xlabel("fairness: fewest / mean acquisitions")
    fig.suptitle("Contention: workers loop {acquire; hold 1 ms; release} on one lock",
                 fontsize=11)
    fig.tight_layout()
    return fig


def figures(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    import matplotlib
    matplotlib.use("Agg")
    out: Dict[str, Any] = {}
    bench = [r for r in runs if r["benchmark"] == "bench.py"]
    handoff = [r for r in runs if r["benchmark"] == "handoff.py"]
    if bench:
        out["cycle.png"] = cycle_figure(bench)
    if handoff:   # the last handoff run given
        out["handoff.png"] = handoff_figure(handoff[-1])
        out["contention.png"] = contention_figure(handoff[-1])
    return out


def render(paths: List[Path]) -> Dict[str, bytes]:
    """{file name: PNG bytes} for the runs in paths."""
    import matplotlib.pyplot as plt
    out: Dict[str, bytes] = {}
    for name, fig in figures(load(paths)).items():
        buf = io.BytesIO()
        # No timestamp or version in the file, so equal input gives equal bytes.
        fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
        plt.close(fig)
        out[name] = buf.getvalue()
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", type=Path, help="results of bench.py / handoff.py")
    ap.add_argument("-o", "--out", type=Path, default=Path("."),
                    help="directory for the PNG files (default: here)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, png in render(args.json).items():
        (args.out / name).write_bytes(png)
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
