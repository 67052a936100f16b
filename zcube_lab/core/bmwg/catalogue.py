"""Every test of draft-calabria-bmwg-ai-fabric-inference-bench-05 §5-§13 by section number and
name, with what the lab can do with it (pure; issue 46).

A test's status is one of:
- RUNNABLE: the live lab at its default scale represents it (a 400 Gb/s NIC at 100 Mb/s: a
  frame of 120-1,440 µs of modelled time);
- FINE: only the replay's fine time scale represents it (docs/REPLAY.md): its messages,
  windows or thresholds are below a frame at the default scale;
- NOT: the lab cannot represent it, and `reason` says why.
`runner` marks the tests `zcube-lab bmwg run` carries out now. The parameters are the draft's,
in real units; `zcube_lab.core.bmwg.scaling` gives the lab's scaled ones beside them. KPI names
are the draft's (§4's tables as of -05) or a test's own derived figure (`DERIVED`).
Source read: the authors' public text (fcalabri/bmwg-ai-fabric-inference-bench), sections
numbered as -05; paraphrased, never quoted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

DRAFT = "draft-calabria-bmwg-ai-fabric-inference-bench-05"
RUNNABLE, FINE, NOT = "runnable", "fine scale only", "not representable"
STATUSES = (RUNNABLE, FINE, NOT)

# The KPIs of the draft's §4 tables, as named in -05.
KPIS_05 = (
    "TTFT", "ITL", "E2E_latency", "TTFT_fabric", "ITL_fabric", "TPS_input", "TPS_output",
    "TPS_per_GPU", "Inference_Goodput", "Fabric_Goodput", "Request_Rate", "JFI_decode",
    "KV_xfer_latency", "KV_xfer_bandwidth", "EP_alltoall_latency", "EP_alltoall_bandwidth",
    "Fabric_FCT", "Buffer_utilization", "ECN_marking_rate", "PFC_frame_count",
    "Link_utilization", "Packet_drop_rate",
)  # fmt: skip
# Figures a test derives beside the KPIs (its own measurement list).
DERIVED = (
    "JFI", "tail_spread", "T_prefill", "T_transfer", "T_decode_init", "fabric_fraction",
    "contention_penalty", "scaling_efficiency", "PAUSE_duration", "HOL_delay",
    "convergence_time", "inflection_point", "degradation_factor", "stall_events",
    "disruption_time", "recovery_time", "Prefix_cache_hit_rate",
)  # fmt: skip

# Parameter kinds: how `scaling` turns the draft's value into the lab's.
BYTES, THRESHOLD, SENDERS, PAIRS, EP_SIZE, WORKERS, LEVEL, QPS, PLAIN = (
    "bytes", "threshold", "senders", "pairs", "ep size", "workers", "level", "qps", "plain",
)  # fmt: skip
# Parallel transfers of one pair the lab runs at most as QPs: a transfer already spreads over
# every NIC port of its hosts (one or two here), so more only interleave on the same ports.
MAX_QPS = 8


@dataclass(frozen=True)
class Param:
    """One of a test's parameters: the draft's values (real units) and how they scale."""

    name: str
    draft: tuple[float, ...]
    kind: str = PLAIN
    unit: str = ""


@dataclass(frozen=True)
class BmwgTest:
    """One test of the draft (see the module docstring)."""

    section: str
    name: str
    status: str
    reason: str
    kpis: tuple[str, ...]
    params: tuple[Param, ...] = ()
    trials: int = 20
    # A trial's duration; None where the draft names none because what it repeats is not timed
    # (`repetition`, with {n} for `trials`, says what: §10.1 repeats a single request at least
    # 100 times a prompt length).
    trial_s: float | None = 60.0
    runner: bool = False
    repetition: str = ""

    @property
    def trials_text(self) -> str:
        """The draft's trials in words: "20 x 60 s", or what it repeats how many times."""
        if self.trial_s is None:
            return self.repetition.format(n=self.trials)
        return f"{self.trials} x {self.trial_s:g} s"


KB, MB, GB = 1e3, 1e6, 1e9
_SMALL = "below a frame at the default scale (one lab byte stands for 4,000 real ones)"
_LOADS = Param("background load", (0.25, 0.5, 0.75, 0.9), LEVEL, "of capacity")

TESTS: tuple[BmwgTest, ...] = (
    BmwgTest("5.1", "Point-to-point KV cache transfer throughput", FINE,
             f"messages from 64 KB are {_SMALL}",
             ("KV_xfer_bandwidth",),
             (Param("message size", (64 * KB, 256 * KB, 1 * MB, 4 * MB, 16 * MB, 64 * MB,
                                     256 * MB, 1 * GB), BYTES, "B"),
              Param("QPs", (1, 4, 8, 16, 32, 64, 128), QPS)),
             runner=True),
    BmwgTest("5.2", "KV cache transfer latency", FINE,
             f"µs latencies of 64 KB-1 MB messages are {_SMALL}",
             ("KV_xfer_latency", "Fabric_FCT", "tail_spread"),
             (Param("message size", (64 * KB, 1 * MB, 16 * MB, 256 * MB), BYTES, "B"), _LOADS),
             trial_s=120.0, runner=True),
    BmwgTest("5.3", "Concurrent KV cache transfer scaling", FINE,
             f"a 16 MB message is under 3 frames at the default scale; its µs FCT is {_SMALL}",
             ("KV_xfer_bandwidth", "KV_xfer_latency", "Fabric_FCT", "JFI", "Link_utilization"),
             (Param("concurrent pairs", (1, 2, 4, 8, 16, 32, 64, 128), PAIRS),
              Param("message size", (16 * MB,), BYTES, "B")),
             runner=True),
    BmwgTest("5.4", "Multi-tier storage transfer characterization", NOT,
             "the lab's hosts have one memory: no GPU HBM, CPU DRAM or NVMe tiers and no "
             "GPU-direct paths between them", ("KV_xfer_bandwidth", "KV_xfer_latency"),
             (Param("message size", (1 * MB, 16 * MB, 256 * MB), BYTES, "B"),)),
    BmwgTest("6.1", "End-to-end disaggregated TTFT", RUNNABLE,
             "live serving: modelled prefill, the KV pull, the first decode step",
             ("TTFT", "TTFT_fabric", "T_prefill", "T_transfer", "T_decode_init",
              "fabric_fraction"),
             (Param("prompt tokens", (128, 512, 1024, 2048, 4096, 8192, 16384)),),
             runner=True),
    BmwgTest("6.2", "xPyD ratio optimization", RUNNABLE,
             "live serving over the fabric's GPU hosts, x prefill and y decode",
             ("TTFT", "ITL", "TPS_output", "Inference_Goodput"),
             (Param("prefill share of 12 nodes", (1, 2, 3, 4, 6, 8, 10, 11)),),
             runner=True),
    BmwgTest("6.3", "Heterogeneous parallelism configuration", NOT,
             "the mock engines run one engine per GPU host: no TP or DP-attention groups "
             "whose flow counts could change", ("TTFT", "ITL", "KV_xfer_bandwidth")),
    BmwgTest("6.4", "Prefill queue depth impact on transfer latency", RUNNABLE,
             "live serving above prefill capacity (ECN counts: see 8.1)",
             ("KV_xfer_latency", "PFC_frame_count"),
             (Param("oversubscription", (1.0, 1.25, 1.5, 1.75, 2.0)),)),
    BmwgTest("7.1", "AllToAll dispatch throughput", FINE,
             f"a DeepEP dispatch of ~100 µs is {_SMALL}; run over 8-512 tokens a GPU around "
             "the draft's 128, at EP 8",
             ("EP_alltoall_bandwidth", "EP_alltoall_latency"),
             (Param("batch tokens", (128,)), Param("EP group", (8, 16, 32, 64, 96), EP_SIZE)),
             runner=True),
    BmwgTest("7.2", "Routing mode and dispatch mode comparison", NOT,
             "normal and low-latency dispatch are DeepEP kernel modes (NVLink forwarding, "
             "GPU-initiated RDMA) and expert-choice or token-drop routing needs a router "
             "model: the datagram agents send fixed per-pair messages",
             ("EP_alltoall_latency",)),
    BmwgTest("7.3", "Wide expert parallelism scaling", FINE,
             f"dispatches are {_SMALL}; EP sizes 4, 8, 16, as far as the fabric's hosts reach",
             ("EP_alltoall_latency", "EP_alltoall_bandwidth", "scaling_efficiency"),
             (Param("EP group", (8, 16, 32, 48, 64, 96), EP_SIZE),
              Param("batch tokens", (128,))),
             runner=True),
    BmwgTest("7.4", "Expert parallelism and KV cache transfer contention", FINE,
             f"EP exchanges of ~100 µs and the pauses between them are {_SMALL}",
             ("KV_xfer_latency", "EP_alltoall_latency", "contention_penalty",
              "PFC_frame_count"),
             (Param("KV load", (0.5, 0.75), LEVEL, "of capacity"),
              Param("KV message", (16 * MB,), BYTES, "B")),
             runner=True),
    BmwgTest("8.1", "ECN marking under inference incast", NOT,
             "this kernel builds no marking qdisc (HTB, TBF and FIFO only: RED, GRED, PIE, "
             "FQ_CoDel and CAKE are not set) and the userspace datapath marks no CE",
             ("ECN_marking_rate", "Buffer_utilization"),
             (Param("senders", (2, 4, 8, 16, 32), SENDERS),
              Param("ECN threshold", (100 * KB, 500 * KB, 1 * MB, 5 * MB), THRESHOLD, "B"))),
    BmwgTest("8.2", "PFC behavior under bursty KV cache transfers", FINE,
             "XOFF of 10 KB-1 MB is under a tenth of a frame at the default scale",
             ("PFC_frame_count", "PAUSE_duration", "HOL_delay", "Fabric_FCT"),
             (Param("N_burst", (4, 8, 16, 32), SENDERS),
              Param("message size", (16 * MB,), BYTES, "B"),
              Param("arrival window", (100e-6, 1e-3, 10e-3), PLAIN, "s"),
              Param("PFC threshold", (10 * KB, 100 * KB, 1 * MB), THRESHOLD, "B")),
             runner=True),
    BmwgTest("8.3", "Congestion control convergence for mixed traffic", NOT,
             "DCQCN (or UET's) is a NIC's rate control reacting to CNPs; the lab's hosts have "
             "no RoCE NIC and the replay's senders run at line rate without one",
             ("convergence_time", "JFI", "Packet_drop_rate"),
             (Param("KV load", (0.8,), LEVEL, "of capacity"),)),
    BmwgTest("8.4", "PFC storm and deadlock resilience", FINE,
             "pauses must form and spread hop by hop: the fine scale's lossless agent; "
             "a 300 s trial is 10 wall hours at k = 120",
             ("PFC_frame_count", "recovery_time"), trial_s=300.0, runner=True),
    BmwgTest("9.1", "KV-aware request routing efficacy", NOT,
             "the gateway routes by outstanding requests; it has no KV-occupancy or "
             "path-congestion aware router to compare with round robin",
             ("TTFT", "ITL", "Inference_Goodput"),
             (Param("request rate", (10, 50, 100, 200), PLAIN, "req/s"),)),
    BmwgTest("9.2", "Prefix-aware cache hit rate", NOT,
             "the prefill engines' prefix cache is a fixed hit share of the workload, not a "
             "cache keyed by prefix that a router could aim at",
             ("Prefix_cache_hit_rate", "TTFT", "TPS_output")),
    BmwgTest("9.3", "ECMP and dynamic load balancing under inference traffic", RUNNABLE,
             "live KV pulls and EP exchanges under the controller's routing policies",
             ("JFI", "Link_utilization"), runner=True),
    BmwgTest("9.4", "Jain fairness index for decode worker utilization", RUNNABLE,
             "live serving; decode pools as far as the fabric's GPU hosts reach (half of "
             "them, the other half prefilling: 8 on 16)",
             ("JFI_decode", "TPS_output"),
             (Param("decode workers", (8, 16, 32, 64), WORKERS),),
             runner=True),
    BmwgTest("10.1", "TTFT under varying prompt lengths", RUNNABLE,
             "single requests one at a time on the live lab, TTFT split as in 6.1",
             ("TTFT", "T_prefill", "T_transfer", "T_decode_init", "fabric_fraction"),
             (Param("prompt tokens", (128, 256, 512, 1024, 2048, 4096, 8192, 16384)),),
             trials=100, trial_s=None, runner=True,
             repetition="at least {n} single requests per prompt length (no duration named)"),
    BmwgTest("10.2", "ITL characterization and tail latency", RUNNABLE,
             "a long-output request's token stamps at 1 ms; run below the knee, without the "
             "draft's background load or EP dispatches (512 output tokens, not 2,048)",
             ("ITL", "stall_events"),
             (Param("fabric load", (0.0, 0.5, 0.9), LEVEL, "of capacity"),), runner=True),
    BmwgTest("10.3", "End-to-end latency under multi-tenant load", NOT,
             "the lab starts one serving cluster (one gateway, one model profile) per fabric",
             ("TTFT", "ITL")),
    BmwgTest("10.4", "Latency sensitivity to fabric congestion", FINE,
             "run in §5.2's form: one pair's 1 MB KV messages beside every other host pair's "
             "background at each level, not TTFT and ITL of live serving (the lab's serving "
             f"cells are bound by modelled prefill compute); their µs latencies are {_SMALL}",
             ("KV_xfer_latency", "inflection_point", "degradation_factor"),
             (Param("background load", tuple(round(0.05 * i, 2) for i in range(20)), LEVEL,
                    "of capacity"),),
             runner=True),
    BmwgTest("11.1", "Aggregate tokens per second", RUNNABLE,
             "the load sweep to the SLO (TTFT p99 500 ms, ITL p99 50 ms)",
             ("TPS_output", "TPS_input", "Inference_Goodput", "Request_Rate",
              "Link_utilization"),
             runner=True),
    BmwgTest("11.2", "Batch size scaling and continuous batching impact", RUNNABLE,
             "the decode engines' max_num_seqs (their batching is always continuous)",
             ("TPS_output", "TTFT", "Fabric_Goodput"),
             (Param("max batch", (1, 4, 8, 16, 32, 64, 128)),)),
    BmwgTest("11.3", "Goodput under preemption and eviction", NOT,
             "the mock engines have no KV memory limit: they never evict or preempt",
             ("Inference_Goodput", "TPS_output")),
    BmwgTest("12.1", "Fabric scale limits for inference clusters", RUNNABLE,
             "16 and 64 GPUs, the structure-keeping sizes this machine carries",
             ("KV_xfer_latency", "EP_alltoall_latency", "TTFT", "Link_utilization")),
    BmwgTest("12.2", "Dynamic autoscaling response time", NOT,
             "a run's fabric and serving pools are fixed: no worker joins or leaves",
             ("convergence_time",)),
    BmwgTest("12.3", "Link failure convergence impact on serving", RUNNABLE,
             "the fault schedule's link faults during live serving",
             ("TTFT", "TPS_output", "Packet_drop_rate", "disruption_time", "recovery_time"),
             runner=True),
    BmwgTest("13.1", "24-hour sustained inference load", RUNNABLE,
             "a short soak (24 h does not fit a session)",
             ("TTFT", "ITL", "TPS_output", "KV_xfer_latency", "PFC_frame_count"),
             trials=1, trial_s=86400.0),
    BmwgTest("13.2", "KV cache memory leak detection", NOT,
             "no GPU memory, NIC memory registrations or pinned pages: the mock engines "
             "hold no KV in device memory", (), trials=1, trial_s=86400.0),
    BmwgTest("13.3", "Long-running serving stability", RUNNABLE,
             "a short soak with one link flap at its midpoint (§12.3's link, down 1 s); KV "
             "pull failures, the largest switch queue, OpenFlow sessions lost and TCP "
             "retransmissions stand for QP transitions, buffer, adjacency flaps and RDMA "
             "retransmissions; no FEC on veth pairs",
             ("Packet_drop_rate", "recovery_time", "Buffer_utilization"), trials=1,
             trial_s=86400.0, runner=True),
)  # fmt: skip

BY_SECTION: Mapping[str, BmwgTest] = {t.section: t for t in TESTS}
RUNNERS = tuple(t.section for t in TESTS if t.runner)


def test_of(section: str) -> BmwgTest:
    """The test of a section number ("8.2"); ConfigError naming the sections there are."""
    t = BY_SECTION.get(section.strip().lstrip("§"))
    if t is None:
        raise ConfigError("section", section, f"one of {', '.join(BY_SECTION)}")
    return t


def runnable_sections(sections: Sequence[str]) -> list[BmwgTest]:
    """The tests of `sections` that `bmwg run` carries out; a ConfigError for one it does not
    (naming its status and why, or that it is not built yet)."""
    out = []
    for s in sections:
        t = test_of(s)
        if not t.runner:
            why = t.reason if t.status == NOT else f"{t.status}; not built into bmwg run yet"
            raise ConfigError("section", s, f"one of {', '.join(RUNNERS)} ({s}: {why})")
        out.append(t)
    return out
