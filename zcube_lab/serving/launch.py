"""Command lines for each serving role, built from its frozen config (argument lists, no shell).

The lab calls these to start roles inside Mininet hosts, e.g.
`host.popen(prefill_argv(cfg))`; `LocalCluster` calls them on loopback. The flags come from the
config's option fields (`zcube_lab.core.options.to_argv`), so each argv parses back (through the
role's own flag parser) to an equal config; the tests check that round trip for every role.
"""

from __future__ import annotations

import sys

from zcube_lab.core.options import to_argv
from zcube_lab.serving.config import DecodeConfig, EpWorkerConfig, GatewayConfig, PrefillConfig


def prefill_argv(cfg: PrefillConfig, python: str = sys.executable) -> list[str]:
    """`python -m zcube_lab.serving.prefill ...` for this config."""
    return [python, "-m", "zcube_lab.serving.prefill", *to_argv(cfg)]


def decode_argv(cfg: DecodeConfig, python: str = sys.executable) -> list[str]:
    """`python -m zcube_lab.serving.decode ...` for this config."""
    return [python, "-m", "zcube_lab.serving.decode", *to_argv(cfg)]


def gateway_argv(cfg: GatewayConfig, python: str = sys.executable) -> list[str]:
    """`python -m zcube_lab.serving.gateway ...` for this config."""
    return [python, "-m", "zcube_lab.serving.gateway", *to_argv(cfg)]


def ep_worker_argv(cfg: EpWorkerConfig, python: str = sys.executable) -> list[str]:
    """`python -m zcube_lab.serving.ep_worker ...` for this config."""
    return [python, "-m", "zcube_lab.serving.ep_worker", *to_argv(cfg)]
