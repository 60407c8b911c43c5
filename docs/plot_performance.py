"""Make docs/performance.png from the JSON written by ``python -m asv_benchmarks.ratios``.

Usage (from the repository root)::

    python -m asv_benchmarks.ratios --json docs/performance.json
    python docs/plot_performance.py [docs/performance.json] [-o docs/performance.png]
    python docs/plot_performance.py --markdown     # the table of docs/performance.md

Left: our value+Jacobian / residual ratio for every problem and size, with the
speed targets as marks.  Right: the sizes compared with other
tools, our bar beside the peers' figures (a range is drawn as its midpoint with
an error bar spanning low to high).  Needs matplotlib (the ``bench`` extra).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    with open(path) as f:
        return json.load(f)


def _engine_ratio(r):
    """The default engine's ratio of a result (``forward.seed``'s in older runs)."""
    return r.get("traced_ratio_pool") or r["ratio"]


def _engine_target(r, targets):
    if r.get("traced_ratio_pool"):
        return r.get("engine_target")
    return targets.get("%s-%d" % (r["problem"], r["size"]))


def plot(data, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def log_axis(ax):
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(bottom=1)

    results = data["results"]
    peer_names = data["peer_names"]
    targets = data["targets"]["ratio"]

    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [1.2, 1]})

    # ---- left: every problem and size
    labels = ["%s\n%s" % (r["name"], r["label"]) for r in results]
    xs = range(len(results))
    colours = {key: "C%d" % i for i, key in enumerate(dict.fromkeys(r["problem"] for r in results))}
    left.bar(xs, [_engine_ratio(r) for r in results],
             color=[colours[r["problem"]] for r in results])
    for x, r in zip(xs, results):
        left.annotate("%.1f" % _engine_ratio(r), (x, _engine_ratio(r)), ha="center",
                      va="bottom", fontsize=8)
        left.plot([x], [r["ratio"]], marker="_", markersize=14, color="0.45")
        target = _engine_target(r, targets)
        if target is not None:
            left.plot([x - 0.4, x + 0.4], [target, target], color="k", lw=2)
    left.plot([], [], color="k", lw=2, label="target")
    left.plot([], [], marker="_", markersize=14, ls="", color="0.45", label="forward.seed")
    log_axis(left)
    left.set_xticks(list(xs))
    left.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
    left.set_ylabel("value_and_jacobian(F) time / numpy residual time")
    left.set_title("sparsegrad %s (%s kernels)" % (
        data["environment"]["sparsegrad"], data["environment"]["kernels"]))
    left.legend(loc="upper right", fontsize=8)

    # ---- right: ours beside the peers
    compared = [r for r in results if r.get("peers")]
    if compared:
        names = ["sparsegrad (this run)"] + list(peer_names)
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            mids, errs = [], [[], []]
            for r in compared:
                if i == 0:
                    lo = hi = _engine_ratio(r)
                else:
                    lo, hi = r["peers"][name]
                mid = (lo + hi) / 2
                mids.append(mid)
                errs[0].append(mid - lo)
                errs[1].append(hi - mid)
            pos = [j - 0.4 + width * (i + 0.5) for j in range(len(compared))]
            right.bar(pos, mids, width, yerr=errs, capsize=2, label=name,
                      color="#222222" if i == 0 else "C%d" % (i + 4))
        for j, r in enumerate(compared):
            target = _engine_target(r, targets)
            if target is not None:
                right.plot([j - 0.4, j + 0.4], [target, target], color="k", lw=2)
        log_axis(right)
        right.set_xticks(range(len(compared)))
        right.set_xticklabels(["%s\n%s" % (r["name"], r["label"]) for r in compared], fontsize=8)
        right.set_title("beside the peers (their published figures)")
        right.plot([], [], color="k", lw=2, label="target")
        right.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    else:
        right.set_axis_off()
        right.text(0.5, 0.5, "no size compared with peers in this run", ha="center")

    env = data["environment"]
    fig.suptitle("Jacobian cost relative to the plain residual (lower is better); numpy %s, "
                 "scipy %s, %s CPUs, %s" % (env["numpy"], env["scipy"], env["cpus"], env["date"]),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(data):
    """The measured figures as a markdown table (for docs/performance.md)."""
    targets = data["targets"]
    rows = ["| problem | size | unknowns | nnz | residual [ms] | default engine, on the pool "
            "(target) | floor, on the pool | `forward.seed` [ms] | `forward.seed` (target) "
            "| sparsity/seed (<= %g) | peak mem / Jacobian (<= %g) |"
            % (targets["sparsity"], targets["memory"]),
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in data["results"]:
        target = targets["ratio"].get("%s-%d" % (r["problem"], r["size"]))
        ratio = "%.1fx" % r["ratio"]
        if target is not None:
            ratio += " (<= %gx)" % target
        engine = "-"
        if r.get("traced_ratio_pool") is not None:
            engine = "%.2fx" % r["traced_ratio_pool"]
            if r.get("engine_target") is not None:
                engine += " (<= %gx)" % r["engine_target"]
        floor = ("%.2fx" % (r["floor_s"] / r["residual_pool_s"])
                 if r.get("floor_s") and r.get("residual_pool_s") else "-")
        memory = "%.2fx" % r["memory_ratio"] if "memory_ratio" in r else "-"
        rows.append("| %s | %s | %d | %d | %.3g | %s | %s | %.3g | %s | %.2f | %s |" % (
            r["name"], r["label"], r["unknowns"], r["nnz"], 1e3 * r["residual_s"], engine,
            floor, 1e3 * r["jacobian_s"], ratio, r["sparsity_ratio"], memory))
    if data.get("scaling"):
        rows += ["", "| scaling step | nonzeros | time | time per 4x nonzeros (3.08 to 5.2) |",
                 "| --- | ---: | ---: | ---: |"]
        for c in data["scaling"]:
            rows.append("| %s %s -> %s%s | x%.2f | x%.2f | %.2fx |" % (
                c["problem"], c["from_label"], c["to_label"], "" if c["target"] else " (info)",
                c["nnz_growth"], c["time_growth"], c["per_4x"]))
    return "\n".join(rows) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="?", default=os.path.join(HERE, "performance.json"))
    parser.add_argument("-o", "--output", default=os.path.join(HERE, "performance.png"))
    parser.add_argument("--markdown", action="store_true",
                        help="print the table for docs/performance.md instead of plotting")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(load(args.json)), end="")
        return 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_performance.py needs matplotlib: pip install matplotlib "
              "(or the 'bench' extra)", file=sys.stderr)
        return 2
    print(plot(load(args.json), args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
