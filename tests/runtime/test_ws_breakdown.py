"""The weight-sync breakdown's timers, renderer and probe options (benchmarks/engine/ws_breakdown.py,
weight_sync_probe.py), on CPU with plain Python objects.

Not testable here: ``install_worker`` / ``install_sender`` wrap verl's vLLM rollout modules, which refuse to import
without vLLM (verl/third_party/vllm/__init__.py raises); the device plan runs them (benchmarks/weight_sync)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]  # no tests.conftest: the device runs tests/runtime with --noconftest



def _load(name: str):
    return importlib.import_module(f"benchmarks.engine.{name}")


wb = _load("ws_breakdown")


class Clock:
    """Each read advances 1 s: elapsed time is the number of clock reads in between, deterministic."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


class Model:
    def __init__(self):
        self.loaded = []

    def load_weights(self, weights):
        for name, _ in weights:  # consumes a (timed) generator: its next() nests inside load_weights
            self.leaf(name)
        return set(self.loaded)

    def leaf(self, name):
        self.loaded.append(name)


def quant(items):
    for k in items:
        yield (k, 0)


def test_nested_self_time_and_generator_per_next():
    syncs = []
    t = wb.Timers(sync=lambda: syncs.append(1), clock=Clock())
    m = Model()
    assert t.wrap(m, "load_weights", "model.load_weights")
    assert t.wrap(m, "leaf", "leaf")
    timed_quant = t.timed(quant, "quant_weights")
    assert m.load_weights(timed_quant(["a", "b"])) == {"a", "b"}
    s = t.stats
    assert s["leaf"]["calls"] == 2 and s["quant_weights"]["calls"] == 3  # two items + the StopIteration
    assert s["model.load_weights"]["calls"] == 1
    for k in ("leaf", "quant_weights"):  # leaves: nothing nested, self == inclusive, 1 clock step each
        assert s[k]["self_s"] == s[k]["total_s"] == s[k]["calls"]
    outer = s["model.load_weights"]
    assert outer["total_s"] - outer["self_s"] == s["leaf"]["total_s"] + s["quant_weights"]["total_s"]
    assert len(syncs) == 2 * (1 + 2 + 3)  # every enter and exit synchronises
    rec = json.loads(json.dumps(t.record(sync_s=100.0)))
    assert rec["sync_s"] == 100.0 and set(rec["stages"]) == {"model.load_weights", "leaf", "quant_weights"}
    t.reset()
    assert t.stats == {}


def test_wrap_is_idempotent_keeps_exceptions_and_static_methods():
    t = wb.Timers(clock=Clock())

    class Box:
        @staticmethod
        def s(x):
            return x + 1

        def boom(self):
            raise KeyError("x")

    assert t.wrap(Box, "s", "static") and t.wrap(Box, "s", "static")
    assert Box.s(1) == 2 and Box().s(2) == 3
    assert t.stats["static"]["calls"] == 2  # wrapped once although wrap ran twice
    assert t.wrap(Box, "boom", "boom")
    with pytest.raises(KeyError):
        Box().boom()
    assert t.stats["boom"]["calls"] == 1 and not t._stack
    assert not t.wrap(Box, "missing", "x")


def test_proxy_times_methods_of_objects_that_refuse_attributes():
    class Sock:
        __slots__ = ()

        def recv(self):
            return b"ack"

        def send(self, b):
            return len(b)

    sock = Sock()
    with pytest.raises(AttributeError):
        sock.recv = None  # type: ignore[method-assign]
    t = wb.Timers(clock=Clock())
    p = wb.TimedProxy(sock, t, {"recv": "sender.wait_ack"})
    assert p.recv() == b"ack" and p.send(b"12") == 2
    assert t.stats == {"sender.wait_ack": {"calls": 1, "total_s": 1.0, "self_s": 1.0}}


def test_param_loaders_wrapped_by_owner_class():
    class QKVParallelLinear:
        def weight_loader_v2(self, param, w):
            return "qkv"

    class P:
        pass

    class M:
        def named_parameters(self):
            a, b, c = P(), P(), P()
            a.weight_loader = QKVParallelLinear().weight_loader_v2
            b.weight_loader = lambda p, w: "plain"
            self.ps = [("a", a), ("b", b), ("c", c)]
            return self.ps

    t, m = wb.Timers(clock=Clock()), M()
    assert wb.wrap_param_loaders(t, m) == 2
    (_, a), (_, b), _ = m.ps
    assert a.weight_loader(None, None) == "qkv" and b.weight_loader(None, None) == "plain"
    assert set(t.stats) == {"loader.QKVParallelLinear", "loader.<lambda>"}


RECORD = {
    "title": "qwen3-30b-a3b verl bf16",
    "sync_s": 5.0,
    "plain_sync_s": 4.9,
    "stages": {
        "receive_weights": {"calls": 1, "total_s": 4.8, "self_s": 0.3},
        "model.load_weights": {"calls": 1, "total_s": 4.0, "self_s": 1.0},
        "loader.RoutedExperts": {"calls": 18432, "total_s": 3.0, "self_s": 3.0},
        "sender.wait_ack": {"calls": 1, "total_s": 4.5, "self_s": 4.5},
        "zz.custom": {"calls": 2, "total_s": 0.1, "self_s": 0.1},
    },
}


def test_render_orders_stages_and_accounts_the_rest(tmp_path, capsys):
    table = wb.render(RECORD, RECORD["title"])
    rows = [r for r in table.splitlines() if r.startswith("| ")]
    labels = [r.split("|")[1].strip() for r in rows[1:]]
    assert labels[:5] == ["sender.wait_ack", "receive_weights", "model.load_weights", "loader.RoutedExperts",
                          "zz.custom"]
    assert "| loader.RoutedExperts | 18432 | 3000.0 | 3000.0 | 60.0 |" in rows
    # engine self times 0.3 + 1.0 + 3.0 + 0.1 = 4.4 of 5.0; the sender's concurrent wait is not summed
    assert "| (rest: engine time in no stage) |  |  | 600.0 | 12.0 |" in rows
    assert "| sync without timers (median) |  | 4900.0 |  |  |" in rows
    f = tmp_path / "b.json"
    f.write_text(json.dumps(RECORD), encoding="utf-8")
    assert wb.main([str(f)]) == 0
    assert capsys.readouterr().out == table + "\n"
    assert wb.main([]) == 2


def test_probe_options_and_medians(monkeypatch):
    probe = _load("weight_sync_probe")
    assert probe.probe_options({}) == {"syncs": 3, "dtype": "bf16", "breakdown": False, "tp": 1}
    assert probe.probe_options({"WS_SYNCS": "6", "WS_DTYPE": "fp32", "WS_BREAKDOWN": "1", "WS_TP": "2"}) == {
        "syncs": 6, "dtype": "fp32", "breakdown": True, "tp": 2}
    for bad in ({"WS_SYNCS": "0"}, {"WS_DTYPE": "fp16"}, {"WS_BREAKDOWN": "yes"}, {"WS_TP": "0"}):
        with pytest.raises(ValueError):
            probe.probe_options(bad)
    assert probe.timed_median([9.0, 1.0, 2.0, 3.0]) == 2.0  # the warm-up sync is left out
    assert probe.timed_median([9.0]) == 9.0
    assert probe.PATCH_ENV == {"patch": "fast_block_quant", "direct": "direct_sync"}
    monkeypatch.setenv("WS_SYNCS", "0")
    monkeypatch.setattr(sys, "argv", ["weight_sync_probe.py", "--out", "/nonexistent/x"])
    with pytest.raises(SystemExit) as e:
        probe.main()
    assert e.value.code == 2


def test_probe_greedy_compare_locates_where_two_engines_part():
    # seen on Qwen3-30B-A3B: byte-identical parameters, greedy tokens parting at the last step; the verdict says where
    probe = _load("weight_sync_probe")
    a = [{"tokens": [1, 2, 3], "logprobs": [-0.5, -0.25, -1.0]}, {"tokens": [4, 5, 6], "logprobs": [-0.1, -0.2, -0.3]}]
    b = [{"tokens": [1, 2, 3], "logprobs": [-0.5, -0.25, -1.0]}, {"tokens": [4, 5, 7], "logprobs": [-0.1, -0.25, -0.5]}]
    rows = probe.greedy_compare(a, b)
    assert rows[0] == {"first_token_differs_at": None, "first_logprob_equal": True, "max_logprob_gap": 0.0}
    assert rows[1]["first_token_differs_at"] == 2 and rows[1]["first_logprob_equal"]
    assert rows[1]["max_logprob_gap"] == pytest.approx(0.2)  # up to and including the step that parts
    c = [{"tokens": [1, 2, 3], "logprobs": [-0.4, -0.25, -1.0]}]
    assert probe.greedy_compare(a, c)[0]["first_logprob_equal"] is False


def test_probe_at_tp2_streams_to_each_ranks_handle_and_compares_rank_by_rank(tmp_path):
    probe = _load("weight_sync_probe")
    # verl's colocated handle per rank (verl/workers/rollout/vllm_rollout/utils.py _get_zmq_handle, job 0, replica 0)
    assert [probe.zmq_handle(r) for r in range(2)] == ["ipc:///tmp/rl-colocate-zmq-0-replica-0-rank-0.sock",
                                                       "ipc:///tmp/rl-colocate-zmq-0-replica-0-rank-1.sock"]
    assert probe.rank_keyed([{"w": "a"}]) == {"w": "a"}  # TP 1: the names the earlier records used
    assert probe.rank_keyed([{"w": "a"}, {"w": "b"}]) == {"rank0/w": "a", "rank1/w": "b"}
    # a direct engine whose rank 1 differs from the fresh engine's rank 1 is reported there, rank 0 is not
    greedy = [{"tokens": [1], "logprobs": [-0.5]}]
    fresh = probe.rank_keyed([{"w": "a", "s": "x"}, {"w": "b", "s": "y"}])
    direct = probe.rank_keyed([{"w": "a", "s": "x"}, {"w": "B", "s": "y"}])
    for path, fps in (("direct", direct), ("fresh-ref", fresh)):
        (tmp_path / f"ws_c_{path}.json").write_text(json.dumps(
            {"case": "c", "path": path, "tp": 2, "fingerprints": fps, "greedy": greedy, "sync_s": [1.0]}))
    v = probe.verdict(tmp_path, "c")
    assert v["tp"] == [2] and v["direct_vs_fresh-ref_params_differ"] == ["rank1/w"]
    assert v["greedy_direct_eq_fresh-ref"] is True
