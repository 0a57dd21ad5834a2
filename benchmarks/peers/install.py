"""Installs each peer of the side-by-side benchmarks into its own venv, from its pinned
requirements file: ``.peer-venvs/NAME`` at the repository's root (git-ignored), made with the
Python running this script, so that every system and every plain loop runs on one interpreter.

    .venv/bin/python benchmarks/peers/install.py                # Bytewax and Quix Streams
    .venv/bin/python benchmarks/peers/install.py quixstreams    # one of them
    .venv/bin/python benchmarks/peers/install.py --fresh        # delete and make anew

Needs the package index (pip); nothing here is installed into the project's venv, and CI never
runs it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import venv

HERE = os.path.dirname(os.path.abspath(__file__))
# at the repository's root, outside the folders whose files the docs' checks read
VENVS = os.path.join(os.path.dirname(os.path.dirname(HERE)), ".peer-venvs")
PEERS = ("bytewax", "quixstreams")

__all__ = ["PEERS", "VENVS", "python_of", "install"]


def python_of(peer: str) -> str:
    """The interpreter of ``peer``'s venv."""
    return os.path.join(VENVS, peer, "bin", "python")


def install(peer: str, fresh: bool = False) -> str:
    """Makes (or reuses) ``peer``'s venv and installs its pinned requirements; its interpreter."""
    target = os.path.join(VENVS, peer)
    if fresh and os.path.isdir(target):
        shutil.rmtree(target)
    if not os.path.exists(python_of(peer)):
        venv.EnvBuilder(with_pip=True).create(target)
    requirements = os.path.join(HERE, f"requirements-{peer}.txt")
    subprocess.run([python_of(peer), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-r", requirements], check=True)
    return python_of(peer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("peers", nargs="*", default=list(PEERS), help=f"of {', '.join(PEERS)}")
    parser.add_argument("--fresh", action="store_true", help="delete the venvs first")
    args = parser.parse_args()
    for peer in args.peers:
        if peer not in PEERS:
            parser.error(f"unknown peer {peer!r}: one of {', '.join(PEERS)}")
    for peer in args.peers:
        print(f"{peer}: installing into {os.path.relpath(os.path.join(VENVS, peer))}", flush=True)
        python = install(peer, args.fresh)
        out = subprocess.run([python, "-c", f"from importlib.metadata import version; "
                                            f"print(version({peer!r}))"],
                             capture_output=True, text=True, check=True)
        print(f"{peer}: {out.stdout.strip()} ready ({python})", flush=True)


if __name__ == "__main__":
    main()
