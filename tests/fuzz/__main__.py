"""Run the differential fuzzer from the command line.

    python -m tests.fuzz --seconds 3600 --start 0
    python -m tests.fuzz --count 100000 --all
    python -m tests.fuzz --show 1234
    SPARSEGRAD_PURE_PYTHON=1 python -m tests.fuzz --seconds 600
"""
import argparse
import faulthandler
import signal
import sys

from . import oracles
from .programs import FAMILIES, FEATURES, KNOWN_OPEN, generate
from .runner import run


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, help="stop after this long")
    parser.add_argument("--count", type=int, help="stop after this many programs")
    parser.add_argument("--start", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--step", type=int, default=1,
                        help="check every STEP-th seed (default 1; the test suite's "
                        "shards under pytest -n N run with --step N)")
    parser.add_argument("--family", choices=FAMILIES, help="only programs of this family")
    parser.add_argument("--all", action="store_true",
                        help="draw the known-open constructs too (KNOWN_OPEN: %s)"
                        % ", ".join(sorted(KNOWN_OPEN)))
    parser.add_argument("--include", action="append", default=[], choices=sorted(FEATURES),
                        help="draw this known-open construct (repeatable)")
    parser.add_argument("--exclude", action="append", default=[], choices=sorted(FEATURES),
                        help="leave this construct out (repeatable)")
    parser.add_argument("--no-shrink", action="store_true", help="report failures as drawn")
    parser.add_argument("--quiet", action="store_true", help="only the summary")
    parser.add_argument("--seed-log", metavar="PATH",
                        help="write the seed being checked to PATH (finds a crash)")
    parser.add_argument("--show", type=int, metavar="SEED",
                        help="print the program of SEED and its check, and exit")
    args = parser.parse_args(argv)
    # (a fault in compiled code kills the process: the dump's frames name the
    # program, "<program SEED>")
    faulthandler.enable()
    # (``timeout`` ends a run with SIGTERM: it still prints its summary)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    exclude = (set() if args.all else set(KNOWN_OPEN) - set(args.include)) | set(args.exclude)
    if args.show is not None:
        program = generate(args.show, exclude, args.family)
        print(program.source())
        outcome = oracles.check(program)
        print("\n".join(repr(m) for m in outcome.mismatches) or "no mismatch")
        return 0 if outcome.ok else 1
    if args.seconds is None and args.count is None:
        args.seconds = 60.0
    summary = run(args.seconds, args.count, args.start, exclude, args.family,
                  not args.no_shrink, None if args.quiet else print, args.seed_log,
                  args.step)
    print(summary.text())
    return 0 if not summary.failures else 1


if __name__ == "__main__":
    sys.exit(main())
