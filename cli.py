"""Command line: `python -m mizuoto <command>`."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mizuoto", description="Mizuoto text-to-speech runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "version":
        from importlib.metadata import version
        print(version("comfyui-mizuoto"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
