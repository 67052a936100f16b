"""An expert-parallel peer: a secondary GPU host of a multi-host instance.

It only answers the leader's all-to-all exchanges (dispatch in, combine out) on its fabric
address(es). Run: `python -m zcube_lab.serving.ep_worker --bind FABRIC:7300`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Sequence

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.options import add_flags, from_args
from zcube_lab.serving.alltoall import start_ep_server
from zcube_lab.serving.config import EpWorkerConfig
from zcube_lab.serving.gcpause import freeze_heap
from zcube_lab.serving.httpapi import setup_logging


async def serve(cfg: EpWorkerConfig) -> None:
    """Serve every bind address until cancelled."""
    servers = [await start_ep_server(a) for a in cfg.bind]
    freeze_heap()  # zcube_lab.serving.gcpause: start-up's objects out of the collector's walks
    try:
        await asyncio.gather(*(s.serve_forever() for s in servers))
    finally:
        for s in servers:
            s.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """EP worker flags (declared on `EpWorkerConfig`; no config file)."""
    add_flags(parser, EpWorkerConfig)


def config_from_args(args: argparse.Namespace) -> EpWorkerConfig:
    """EpWorkerConfig from parsed flags."""
    return from_args(EpWorkerConfig, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one EP worker until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m zcube_lab.serving.ep_worker", description=__doc__
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))
    setup_logging()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(cfg))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
