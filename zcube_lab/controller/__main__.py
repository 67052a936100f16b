"""`python -m zcube_lab.controller`: run the fabric controller (OpenFlow 1.3 on 127.0.0.1) and its
metrics.

    python -m zcube_lab.controller --fabric-spec '{"kind": "roft", "params": {}}' --policy ecmp \
        --of-port 6653 --metrics-port 9101 --poll-interval 1 [--recompute]

`--recompute` makes the controller route around links that go down (and back when they come
up), sending each switch only what changed; without it the controller only records link state,
and failures are handled by the switches (`ecmp`, `ff`) or not at all (`static`; its earlier
name `single` is still accepted).

os-ken has no `osken-manager` command here, so this does what `ryu-manager` does: register
os-ken's options by importing its modules, parse them into `os_ken.cfg.CONF` (listen host and
port), load the app and its services, create contexts and instantiate the apps, passing our
`ControllerConfig` as a keyword. It prints one line once the OpenFlow port is listening, and
exits cleanly on SIGTERM or SIGINT.

Why not `AppManager.run_apps`: its `finally` joins the service threads after "killing" them, but
with os-ken's native (thread) hub `kill` is a no-op and the OpenFlow server thread never ends, so
a signal would hang it. We close the apps ourselves, with a deadline, then leave with `os._exit`
for the same reason (those threads are not daemons).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from os_ken import cfg

# app_manager imports os_ken.controller.controller, which registers the --ofp-* options; they
# must exist before CONF parses (ryu-manager imports it first for the same reason).
from os_ken.base.app_manager import AppManager
from prometheus_client import CollectorRegistry, start_http_server

from zcube_lab.adapters.ports import port_free
from zcube_lab.controller.app import ControllerConfig
from zcube_lab.controller.rules import ROUTING_ALIASES, ROUTING_POLICIES
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec

LISTEN_HOST = "127.0.0.1"
APP_MODULE = "zcube_lab.controller.app"
LISTEN_DEADLINE_S = 10.0
CLOSE_DEADLINE_S = 5.0

LOG = logging.getLogger("controller")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="python -m zcube_lab.controller",
        description="Route a zcube-lab fabric over OpenFlow 1.3 and export switch counters.",
    )
    p.add_argument(
        "--fabric-spec",
        required=True,
        help='the fabric as FabricSpec JSON, e.g. \'{"kind": "zcube", "params": {"n": 4}}\'',
    )
    p.add_argument(
        "--policy",
        default="ecmp",
        choices=(*ROUTING_POLICIES, *ROUTING_ALIASES),
        help="routing policy",
    )
    p.add_argument(
        "--listen-host",
        default=LISTEN_HOST,
        help="address the OpenFlow port listens on (a cluster's wire address, so switches on "
        "other lab machines reach it; metrics stay on 127.0.0.1)",
    )
    p.add_argument("--of-port", type=int, default=6653, help="OpenFlow TCP port")
    p.add_argument(
        "--metrics-port", type=int, default=9101, help="Prometheus /metrics port on 127.0.0.1"
    )
    p.add_argument(
        "--poll-interval", type=float, default=1.0, help="seconds between statistics polls"
    )
    p.add_argument(
        "--idle-poll-interval",
        type=float,
        default=0.0,
        help="seconds between statistics polls while no port counter moves (above "
        "--poll-interval; 0: always --poll-interval)",
    )
    p.add_argument(
        "--recompute",
        action="store_true",
        help="recompute routes on port-status changes and push the difference to the switches",
    )
    p.add_argument(
        "--ev-rules",
        action="store_true",
        help="also install the static EV rules: bits of a UDP source port pick the next hop "
        "(the MRC transport's paths; zcube_lab.core.fabric.evpaths)",
    )
    p.add_argument("--log-level", default="INFO", help="Python logging level")
    return p.parse_args(argv)


def _listening(port: int, host: str = LISTEN_HOST) -> bool:
    """True once a TCP socket listens on host:port (read from /proc: probing by connecting
    would look like a switch to the controller, probing by binding could steal the port)."""
    octets = [int(o) for o in host.split(".")]
    want = f"{octets[3]:02X}{octets[2]:02X}{octets[1]:02X}{octets[0]:02X}:{port:04X}"
    try:
        with open("/proc/net/tcp", encoding="ascii") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[1] == want and cols[3] == "0A":  # 0A = LISTEN
                    return True
    except OSError:
        return False
    return False


def _serve(
    manager: AppManager,
    config: ControllerConfig,
    args: argparse.Namespace,
    metrics_port: int,
    stop: threading.Event,
) -> int:
    """Start the apps, announce the listening port, wait for a signal; returns the exit code."""
    manager.load_apps([APP_MODULE])
    contexts = manager.create_contexts()
    manager.instantiate_apps(**contexts, zcube_config=config)
    deadline = time.monotonic() + LISTEN_DEADLINE_S
    while not _listening(args.of_port, args.listen_host):
        if stop.is_set():
            return 0
        if time.monotonic() > deadline:
            LOG.error("OpenFlow port %s:%d is not listening", args.listen_host, args.of_port)
            return 1
        time.sleep(0.05)
    fabric = config.fabric
    print(
        f"controller listening on tcp:{args.listen_host}:{args.of_port} (OpenFlow 1.3), "
        f"metrics on http://{LISTEN_HOST}:{metrics_port}/metrics, "
        f"fabric {fabric.kind} ({len(fabric.switches)} switches), policy {config.policy}"
        f"{', recompute' if config.recompute else ''}{', EV rules' if config.ev_rules else ''}",
        flush=True,
    )
    while not stop.wait(0.2):
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the controller until SIGTERM or SIGINT; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    registry = CollectorRegistry()
    try:
        fabric = build_fabric(FabricSpec.from_json(args.fabric_spec))
        config = ControllerConfig(
            fabric,
            args.policy,
            args.poll_interval,
            registry,
            recompute=args.recompute,
            ev_rules=args.ev_rules,
            idle_poll_interval=args.idle_poll_interval,
        )
    except (ConfigError, ValueError, KeyError, TypeError) as err:
        print(f"controller: bad configuration: {err}", file=sys.stderr)
        return 2

    for name, port, host in (
        ("--of-port", args.of_port, args.listen_host),
        ("--metrics-port", args.metrics_port, LISTEN_HOST),
    ):
        if not port_free(port, host):
            print(f"controller: {name} {port} is in use on {host}", file=sys.stderr)
            return 1

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    cfg.CONF(
        args=["--ofp-listen-host", args.listen_host, "--ofp-tcp-listen-port", str(args.of_port)],
        project="os_ken",
    )
    metrics_server, _thread = start_http_server(
        args.metrics_port, addr=LISTEN_HOST, registry=registry
    )
    manager = AppManager.get_instance()
    code = 1
    try:
        code = _serve(manager, config, args, metrics_server.server_port, stop)
    except Exception:
        # os-ken's threads may already run and are not daemons: log, then leave below.
        LOG.exception("controller failed")
    LOG.info("stopping")
    closer = threading.Thread(target=manager.close, daemon=True)
    closer.start()
    closer.join(CLOSE_DEADLINE_S)
    metrics_server.shutdown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
