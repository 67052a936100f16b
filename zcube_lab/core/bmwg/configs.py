"""The draft's reference configurations CFG-A..E and their KV cache sizes (pure; issue 46 item 2).

The draft sizes a request's KV cache as S_KV = 2 x L x H_kv x D x C x P_bytes: K and V, for
each of L layers, H_kv KV heads of D elements, C context tokens, P_bytes bytes an element
(its appendix works a 70B-class model at FP16 and 4K context to 1,342,177,280 bytes). Its §10.1
table lists four model classes, CFG-A..D, with S_KV at 4K, 32K and 128K context, and leaves
CFG-E to the implementer. Results name the configuration, or give L, H_kv, D, C and P_bytes.

CFG-E here is the lab's model, GLM-5.1 (`zcube_lab.serving.models`, profile `glm-5.1`). It does
not store K and V per head: its attention is latent (MLA), one compressed vector of
`KV_LORA_RANK` elements and one shared rotary key of `ROPE_DIM` elements a layer a token, BF16,
78 layers: 78 x (512 + 64) x 2 = 89,856 bytes a token. In the formula's terms the factor
2 x H_kv x D (elements a layer a token) is 576, which we write as H_kv = 1 and D = 288: an
equivalent of the formula, not heads GLM-5.1 has. The lab's profile counts the latent cache
alone (no indexer keys of its sparse attention).

At the live lab's default scale (`zcube_lab.core.bmwg.scaling.default_scale`) one lab byte
stands for 4,000 real ones; a transfer moves at the 400 Gb/s NIC's modelled rate, undilated, so
one pull of S_KV takes S_KV x 8 / 400 Gb/s of modelled (and wall) time. The lab carries one
transfer when that is within the decode engine's pull timeout (`KV_TIMEOUT_S`, the serving
config's `kv_timeout_s`); a pull near it has no headroom for queueing or retries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

# Context lengths of the draft's table (tokens).
CONTEXTS: Mapping[str, int] = {"4K": 4096, "32K": 32768, "128K": 131072}
# The decode engine's KV pull timeout (modelled s; `zcube_lab.serving.config` kv_timeout_s).
KV_TIMEOUT_S = 10.0
# GLM-5.1's latent attention (the lab's `glm-5.1` profile).
GLM_LAYERS, KV_LORA_RANK, ROPE_DIM = 78, 512, 64


@dataclass(frozen=True)
class KvConfig:
    """One reference configuration: the formula's terms, and the draft's S_KV figures (GB as
    it writes them, None for CFG-E; `draft_floor` marks a figure the draft gives as "> x")."""

    id: str
    profile: str
    layers: int  # L
    kv_heads: int  # H_kv
    head_dim: int  # D
    p_bytes: int  # P_bytes
    precision: str
    draft_gb: Mapping[str, float] | None = None
    draft_floor: tuple[str, ...] = ()
    note: str = ""

    @property
    def bytes_per_token(self) -> int:
        """S_KV of one context token: 2 x L x H_kv x D x P_bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.p_bytes

    def terms(self) -> str:
        return (
            f"L={self.layers}, H_kv={self.kv_heads}, D={self.head_dim}, "
            f"P_bytes={self.p_bytes} ({self.precision})"
        )


def s_kv(layers: int, kv_heads: int, head_dim: int, context: int, p_bytes: int) -> int:
    """The draft's S_KV = 2 x L x H_kv x D x C x P_bytes (bytes); a ConfigError naming the
    term for one that is not a positive whole number."""
    for name, v in (("L", layers), ("H_kv", kv_heads), ("D", head_dim), ("C", context),
                    ("P_bytes", p_bytes)):  # fmt: skip
        if not isinstance(v, int) or v < 1:
            raise ConfigError(name, v, "a positive whole number")
    return 2 * layers * kv_heads * head_dim * context * p_bytes


def size_of(cfg: KvConfig, context: int) -> int:
    """S_KV of `cfg` at `context` tokens (bytes)."""
    return s_kv(cfg.layers, cfg.kv_heads, cfg.head_dim, context, cfg.p_bytes)


def _draft(a: float, b: float, c: float) -> dict[str, float]:
    return dict(zip(CONTEXTS, (a, b, c), strict=True))


CONFIGS: tuple[KvConfig, ...] = (
    KvConfig("CFG-A", "small, GQA", 32, 8, 128, 2, "BF16", _draft(0.25, 2.0, 8.0)),
    KvConfig("CFG-B", "mid, GQA (~70B dense class)", 80, 8, 128, 2, "BF16",
             _draft(1.3, 10.5, 42.0)),
    KvConfig("CFG-C", "large, MHA", 96, 64, 128, 2, "BF16", _draft(12.3, 98.6, 300.0),
             draft_floor=("128K",)),
    KvConfig("CFG-D", "mid, GQA, INT8", 80, 8, 128, 1, "INT8", _draft(0.67, 5.4, 21.5)),
    KvConfig("CFG-E", "GLM-5.1 (the lab's model), MLA", GLM_LAYERS, 1,
             (KV_LORA_RANK + ROPE_DIM) // 2, 2, "BF16",
             note=f"latent attention: {KV_LORA_RANK} latent + {ROPE_DIM} rotary-key elements a "
             f"layer a token (2 x H_kv x D = {KV_LORA_RANK + ROPE_DIM}: H_kv = 1, D = "
             f"{(KV_LORA_RANK + ROPE_DIM) // 2} is the formula's equivalent, not heads)"),
)  # fmt: skip
BY_ID: Mapping[str, KvConfig] = {c.id: c for c in CONFIGS}
LAB = BY_ID["CFG-E"]  # what every live run serves


def config_of(name: str) -> KvConfig:
    """The configuration named "CFG-B" (or "b"); ConfigError naming the ones there are."""
    key = name.strip().upper()
    key = key if key.startswith("CFG-") else f"CFG-{key}"
    if key not in BY_ID:
        raise ConfigError("configuration", name, f"one of {', '.join(BY_ID)}")
    return BY_ID[key]


def draft_ratio(cfg: KvConfig, context: str) -> float | None:
    """The formula's S_KV (decimal GB) over the draft's listed figure at `context` ("4K");
    None where the draft lists none (CFG-E)."""
    if cfg.draft_gb is None:
        return None
    return size_of(cfg, CONTEXTS[context]) / 1e9 / cfg.draft_gb[context]


@dataclass(frozen=True)
class LabTransfer:
    """One pull of a configuration's KV at a context, in the lab."""

    real_bytes: int
    lab_bytes: int
    frames: int  # frames of `mtu` it takes in the lab
    pull_s: float  # its ideal time at the NIC's rate (modelled s)
    carried: bool  # within KV_TIMEOUT_S

    def verdict(self) -> str:
        if not self.carried:
            return f"no: a pull of {self.pull_s:.3g} s exceeds the {KV_TIMEOUT_S:g} s pull timeout"
        headroom = KV_TIMEOUT_S / self.pull_s if self.pull_s > 0 else math.inf
        tight = " (little headroom)" if headroom < 2 else ""
        return f"yes: {self.pull_s:.3g} s a pull{tight}"


def lab_transfer(real_bytes: int, bandwidth_scale: float, nic_gbps: float = 400.0,
                 mtu: int = 1500, timeout_s: float = KV_TIMEOUT_S) -> LabTransfer:  # fmt: skip
    """`real_bytes` of KV as the lab moves them at byte scale `bandwidth_scale` (real bytes a
    lab byte): its lab bytes (at least 1), whole frames, ideal pull time at `nic_gbps` and
    whether it is within `timeout_s`."""
    if not bandwidth_scale > 0 or not nic_gbps > 0:
        raise ConfigError("bandwidth_scale", bandwidth_scale, "a positive scale and NIC rate")
    lab = max(1, math.ceil(real_bytes / bandwidth_scale))
    pull = real_bytes * 8 / (nic_gbps * 1e9)
    return LabTransfer(real_bytes, lab, math.ceil(lab / mtu), pull, pull <= timeout_s)


def _gb(x: float) -> str:
    return f"{x / 1e9:,.3g} GB"


def table_rows(bandwidth_scale: float, nic_gbps: float = 400.0) -> list[list[str]]:
    """[config, model, terms, then per context: S_KV (draft's), lab bytes and whether the lab
    carries one pull] for every configuration."""
    rows = []
    for c in CONFIGS:
        row = [c.id, c.profile, c.terms()]
        for name, n in CONTEXTS.items():
            real = size_of(c, n)
            t = lab_transfer(real, bandwidth_scale, nic_gbps)
            draft = ""
            if c.draft_gb is not None:
                floor = ">" if name in c.draft_floor else ""
                draft = f" (draft {floor}{c.draft_gb[name]:g})"
            row.append(f"{_gb(real)}{draft}; lab {t.lab_bytes:,} B; {t.verdict()}")
        rows.append(row)
    return rows


def describe(cfg: KvConfig) -> str:
    """One line naming a configuration by the formula's terms (what results must state)."""
    per_token = f"{cfg.bytes_per_token:,} B a token"
    extra = f"; {cfg.note}" if cfg.note else ""
    return f"{cfg.id} ({cfg.profile}): {cfg.terms()}, {per_token}{extra}"


# What the formula gives against the draft's table (tests/unit/test_bmwg_configs.py checks it):
# CFG-B, CFG-C and CFG-D within 5% of the draft's figures (decimal GB), CFG-C's 128K above its
# "> 300 GB"; CFG-A's figures are exactly half the formula's in GiB (0.5, 4, 16 GiB listed as
# 0.25, 2, 8), 2.15 times under it in GB, as if the row counted K or V alone.
DRAFT_CHECK = (
    "S_KV by the formula against the draft's table: CFG-B, CFG-C and CFG-D agree within 5% "
    '(the draft mixes GB and GiB), CFG-C at 128K is above its "> 300 GB"; CFG-A\'s figures '
    "(0.25, 2.0, 8.0 GB) are half the formula's in GiB (0.5, 4, 16 GiB = 0.54, 4.3, 17.2 GB), "
    "as if that row counted K or V alone: the lab uses the formula's."
)
