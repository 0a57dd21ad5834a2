"""The ``samza-dsl`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from samza_dsl.errors import SamzaError

__all__ = ["main"]


def _parse_config(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SamzaError(f"-c takes key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _partitions(pairs: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            out[key] = int(value)
        except ValueError:
            raise SamzaError(f"--partitions takes stream=count, got {pair!r}") from None
        if not sep:
            raise SamzaError(f"--partitions takes stream=count, got {pair!r}")
    return out


def cmd_plan(args: argparse.Namespace) -> int:
    from planner.render import render

    from .loader import load_app

    app = load_app(args.app)
    plan = app.plan(partitions=_partitions(args.partitions), config=_parse_config(args.config))
    text = render(plan, args.format)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote the {args.format} plan of {plan.job_name} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from planner.render import FORMATS

    parser = argparse.ArgumentParser(prog="samza-dsl", description="Samza's high-level API in Python")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="plan an application and print or draw the plan")
    p.add_argument("app", help="module_or_file.py:attr")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--partitions", action="append", default=[], metavar="STREAM=COUNT",
                   help="partition count of a stream the plan cannot look up")
    p.set_defaults(func=cmd_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except SamzaError as exc:
        print(f"samza-dsl {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
