#!/usr/bin/env python3
"""Draws Osprey's reports and benchmark results as PNG (matplotlib, optional).

  plot.py report REPORT.json OUT.png     loss and samples/s over steps (osprey launch --report-json)
  plot.py transport BENCH.json OUT.png   GB/s by message size, Osprey vs raw ZeroMQ
  plot.py codec BENCH.json OUT.png       the codec table: GB/s per codec and size
  plot.py dlrm BENCH.json OUT.png        DLRM samples/s per case vs the PyTorch reference

Called by `osprey plot` and `osprey bench WHAT ... --plot OUT.png`. Exit codes: 0 written,
2 bad input (named), 3 matplotlib is not installed (the message says how to get it).
"""
import json
import sys


def fail(code, msg):
    print("plot.py: " + msg, file=sys.stderr)
    sys.exit(code)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(2, "cannot read %s: %s" % (path, e))


def plot_report(plt, data, path):
    if not isinstance(data, dict) or "curve" not in data:
        fail(2, "%s is not an osprey launch --report-json report with a curve" % path)
    curve = [p for p in data["curve"] if p.get("step") is not None]
    if not curve:
        fail(2, "%s: the curve is empty (the job ended before the first progress poll)" % path)
    steps = [p["step"] for p in curve]
    fig, ax1 = plt.subplots(figsize=(8, 4.5))
    loss = [(p["step"], p["loss"]) for p in curve if p.get("loss") is not None]
    ax1.plot([s for s, _ in loss], [l for _, l in loss], color="tab:blue", label="loss")
    ax1.set_xlabel("step (slowest live worker)")
    ax1.set_ylabel("training loss (mean over workers)", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(steps, [p["samples_per_sec"] or 0 for p in curve], color="tab:orange",
             label="samples/s")
    ax2.set_ylabel("samples/s (job)", color="tab:orange")
    title = "Osprey job: AUC %s" % ("%.4f" % data["auc"] if data.get("auc") is not None else "n/a")
    if data.get("oracle_auc") is not None:
        title += " (oracle %.4f)" % data["oracle_auc"]
    ax1.set_title(title)
    return fig


def plot_transport(plt, rows, path):
    if not isinstance(rows, list) or not rows or "gbps" not in rows[0]:
        fail(2, "%s is not osprey-bench-transport --json output" % path)
    # One panel per transport; one colour per op, solid for Osprey, dashed for raw ZeroMQ.
    series = {}
    for r in rows:
        if r.get("bytes") is None or r.get("gbps") is None or r.get("case") not in ("dense", "raw_zmq"):
            continue
        series.setdefault(r["transport"], {}).setdefault((r["op"], r["case"]), []).append(
            (r["bytes"], r["gbps"]))
    if not series:
        fail(2, "%s has no dense or raw_zmq rows" % path)
    ops = sorted({op for t in series.values() for op, _ in t})
    colour = {op: plt.get_cmap("tab10")(i % 10) for i, op in enumerate(ops)}
    fig, axes = plt.subplots(1, len(series), figsize=(6 * len(series), 4.5), squeeze=False)
    for ax, (transport, by) in zip(axes[0], sorted(series.items())):
        for (op, case), pts in sorted(by.items()):
            pts.sort()
            ax.plot([b for b, _ in pts], [g for _, g in pts], marker="o", color=colour[op],
                    linestyle="-" if case == "dense" else "--",
                    label=("Osprey " if case == "dense" else "raw ZeroMQ ") + op)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("GB/s")
        ax.set_title("%s: Osprey (solid) vs raw ZeroMQ (dashed)" % transport)
        ax.legend(fontsize=7)
    return fig


def plot_codec(plt, rows, path):
    if not isinstance(rows, list) or not rows or "codec" not in rows[0]:
        fail(2, "%s is not osprey-bench-codec --json output" % path)
    rows = [r for r in rows if r.get("gbps") is not None]
    sizes = sorted({r["n"] for r in rows})
    codecs = []
    for r in rows:
        name = r["codec"] + ("" if r.get("density") is None else " d=%g" % r["density"])
        if name not in codecs:
            codecs.append(name)
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(codecs) + 1.5))
    width = 0.8 / max(1, len(sizes))
    for i, n in enumerate(sizes):
        vals = []
        for c in codecs:
            g = [r["gbps"] for r in rows if r["n"] == n and
                 r["codec"] + ("" if r.get("density") is None else " d=%g" % r["density"]) == c]
            vals.append(g[0] if g else 0)
        ax.barh([j + i * width for j in range(len(codecs))], vals, height=width, label="n=%d" % n)
    ax.set_yticks([j + 0.4 - width / 2 for j in range(len(codecs))])
    ax.set_yticklabels(codecs, fontsize=7)
    ax.set_xlabel("GB/s (input bytes / median time)")
    ax.set_title("Codecs (%s)" % rows[0].get("device", "?"))
    ax.legend(fontsize=7)
    return fig


def plot_dlrm(plt, rows, path):
    if not isinstance(rows, list) or not rows or "samples_per_sec" not in rows[0]:
        fail(2, "%s is not osprey-bench-dlrm --json output" % path)
    labels, osprey, ref = [], [], []
    # The reference's own rows are drawn as the orange bar of the Osprey rows of their batch.
    rows = [r for r in rows if "reference" not in str(r.get("case", ""))]
    if not rows:
        fail(2, "%s has no Osprey rows" % path)
    for r in rows:
        labels.append("%s gpus=%s b=%s c=%s" % (r.get("case"), r.get("gpus"), r.get("batch"),
                                                 r.get("cache_fraction")))
        osprey.append(r.get("samples_per_sec") or 0)
        ref.append(r.get("reference_samples_per_sec") or 0)
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(rows) + 1.5))
    y = list(range(len(rows)))
    ax.barh([v - 0.2 for v in y], osprey, height=0.4, label="Osprey")
    ax.barh([v + 0.2 for v in y], ref, height=0.4, label="PyTorch reference")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("samples/s")
    ax.set_title("DLRM training throughput")
    ax.legend(fontsize=7)
    return fig


KINDS = {"report": plot_report, "transport": plot_transport, "codec": plot_codec, "dlrm": plot_dlrm}


def main(argv):
    if len(argv) != 4 or argv[1] not in KINDS:
        fail(2, "usage: plot.py {%s} INPUT.json OUT.png" % "|".join(sorted(KINDS)))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail(3, "matplotlib is not installed for %s: `python3 -m pip install matplotlib`, or "
                "`bash deploy/venv.sh` and OSPREY_PYTHON=<venv>/bin/python" % sys.executable)
    fig = KINDS[argv[1]](plt, load(argv[2]), argv[2])
    fig.tight_layout()
    try:
        fig.savefig(argv[3], dpi=110)
    except OSError as e:
        fail(2, "cannot write %s: %s" % (argv[3], e))
    print("plot.py: wrote " + argv[3])


if __name__ == "__main__":
    main(sys.argv)
