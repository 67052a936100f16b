"""bench/kv_seen.py: the switch ports' byte counters read back from a run's series.json, and
the table it prints (the rule before and now)."""

from __future__ import annotations

from bench.kv_seen import counter_samples, table_lines


def test_counters_by_direction_and_port() -> None:
    series = {
        "series": [
            {
                "matcher": "zcube_port_tx_bytes_total",
                "metric": {"switch": "leaf0", "port": "3", "peer": "h1"},
                "values": [[4.0, "800"], [2.0, "0"]],
            },
            {
                "matcher": "zcube_port_rx_bytes_total",
                "metric": {"switch": "leaf0", "port": "3"},
                "values": [[2.0, "5"]],
            },
            {"matcher": "zcube:gateway_time_to_first_token_seconds_bucket", "metric": {}},
            {"matcher": "zcube_port_tx_bytes_total", "metric": {"switch": "s"}, "values": []},
        ]
    }
    got = counter_samples(series)
    assert got["tx"] == {("leaf0", 3): [(2.0, 0.0), (4.0, 800.0)]}  # sorted by time
    assert got["rx"] == {("leaf0", 3): [(2.0, 5.0)]}
    assert counter_samples({}) == {"tx": {}, "rx": {}}


def test_the_table_says_what_each_rule_read() -> None:
    rows = [
        {"run": "r1", "ratio_p50": 2.4, "mean_busy": 0.199, "seen_busy": 0.53,
         "before": "artifact", "now": "passes"},
        {"run": "r2", "ratio_p50": None, "mean_busy": None, "seen_busy": None,
         "before": "-", "now": "-"},
    ]  # fmt: skip
    lines = table_lines(rows)
    assert lines[2] == "| r1 | 2.40x | 20% | 53% | artifact | passes |"
    assert lines[3] == "| r2 | - | - | - | - | - |"
