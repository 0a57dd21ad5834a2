"""Installs each peer of the side-by-side benchmarks into its own venv, from its pinned
requirements file: ``.peer-venvs/NAME`` at the repository's root (git-ignored), made with the
Python running this script, so that every system and every plain loop runs on one interpreter.
Kafka Streams, the Java peer of W1 through Kafka, is built with Maven from
``benchmarks/peers/kafka-streams/pom.xml`` into ``.peer-venvs/kafka-streams`` (its jar, and its
dependencies in ``lib/``).

    .venv/bin/python benchmarks/peers/install.py                # every peer
    .venv/bin/python benchmarks/peers/install.py quixstreams    # one of them
    .venv/bin/python benchmarks/peers/install.py kafka-streams  # needs mvn and a JDK 17+
    .venv/bin/python benchmarks/peers/install.py --fresh        # delete and make anew

Needs the package index (pip) and, for Kafka Streams, Maven Central; nothing here is installed
into the project's venv, and CI never runs it.
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
#: the JVM peer: Kafka Streams, for W1 through Kafka only (benchmarks/peers/compare_kafka.py)
KAFKA_STREAMS = "kafka-streams"

__all__ = ["KAFKA_STREAMS", "PEERS", "VENVS", "python_of", "install", "kafka_streams_classpath"]


def python_of(peer: str) -> str:
    """The interpreter of ``peer``'s venv."""
    return os.path.join(VENVS, peer, "bin", "python")


def kafka_streams_classpath() -> str:
    """The Java class path of the built Kafka Streams peer (its jar and ``lib/*``)."""
    target = os.path.join(VENVS, KAFKA_STREAMS)
    return f"{os.path.join(target, 'w1-kafka-streams.jar')}:{os.path.join(target, 'lib', '*')}"


def _build_kafka_streams(target: str) -> str:
    """``mvn package dependency:copy-dependencies`` of the Kafka Streams peer into ``target``."""
    if shutil.which("mvn") is None or shutil.which("javac") is None:
        raise SystemExit("kafka-streams: needs Maven (mvn) and a JDK 17 or newer (javac)")
    subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", f"-Dpeer.dir={target}",
                    "package", "dependency:copy-dependencies"],
                   cwd=os.path.join(HERE, KAFKA_STREAMS), check=True)
    return kafka_streams_classpath()


def install(peer: str, fresh: bool = False) -> str:
    """Makes (or reuses) ``peer``'s venv and installs its pinned requirements; its interpreter
    (for Kafka Streams: builds it, and returns its class path)."""
    target = os.path.join(VENVS, peer)
    if fresh and os.path.isdir(target):
        shutil.rmtree(target)
    if peer == KAFKA_STREAMS:
        return _build_kafka_streams(target)
    if not os.path.exists(python_of(peer)):
        venv.EnvBuilder(with_pip=True).create(target)
    requirements = os.path.join(HERE, f"requirements-{peer}.txt")
    subprocess.run([python_of(peer), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-r", requirements], check=True)
    return python_of(peer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    every = (*PEERS, KAFKA_STREAMS)
    parser.add_argument("peers", nargs="*", default=list(every), help=f"of {', '.join(every)}")
    parser.add_argument("--fresh", action="store_true", help="delete the venvs first")
    args = parser.parse_args()
    for peer in args.peers:
        if peer not in every:
            parser.error(f"unknown peer {peer!r}: one of {', '.join(every)}")
    for peer in args.peers:
        print(f"{peer}: installing into {os.path.relpath(os.path.join(VENVS, peer))}", flush=True)
        if peer == KAFKA_STREAMS:
            install(peer, args.fresh)
            print(f"{peer}: built ({os.path.relpath(os.path.join(VENVS, peer))})", flush=True)
            continue
        python = install(peer, args.fresh)
        out = subprocess.run([python, "-c", f"from importlib.metadata import version; "
                                            f"print(version({peer!r}))"],
                             capture_output=True, text=True, check=True)
        print(f"{peer}: {out.stdout.strip()} ready ({python})", flush=True)


if __name__ == "__main__":
    main()
