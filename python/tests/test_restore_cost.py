"""kvstash.RestoreCostModel: the binding of kvstash/restore_cost.h, with estimates
derived by hand from the samples fed in."""

from __future__ import annotations

import pytest

import kvstash


def test_uninformed_declines_the_hit():
    m = kvstash.RestoreCostModel()
    e = m.estimate(1000)
    assert not e.informed and not e.take
    assert m.policy == "cost"


def test_recompute_counts_its_own_tokens():
    m = kvstash.RestoreCostModel()
    m.observe_prefill(1000, 1.0)
    m.observe_restore(1000, 0, 0.0, 0.5)
    e = m.estimate(1000, 400)
    assert e.recompute_tokens == 400 and e.recompute_s == pytest.approx(0.4) and not e.take
    assert m.estimate(1000, 600).take


def test_estimate_and_decision():
    m = kvstash.RestoreCostModel(link_bytes_per_s=1e9)
    m.observe_prefill(1000, 1.0)              # 1 ms/token
    m.observe_encode(1000, 4_000_000, 3.0)    # 3 ms/token, 4000 bytes/token
    e = m.estimate(500)
    assert e.informed and e.decode_from_encode and not e.take
    assert e.decode_s == pytest.approx(1.5)
    assert e.transfer_s == pytest.approx(500 * 4000 / 1e9)
    assert e.recompute_s == pytest.approx(0.5)
    m.observe_restore(1000, 2_000_000, 0.004, 0.2)
    e = m.estimate(500)
    assert e.take and not e.decode_from_encode
    assert e.decode_s == pytest.approx(0.1)
    assert e.transfer_s == pytest.approx(500 * 3000 * 0.004 / 2e6)
    r = m.rates()
    assert r["prefill_samples"] == 1 and r["decode_samples"] == 1 and r["encode_samples"] == 1
    assert r["bytes_per_token"] == pytest.approx(3000)


def test_policy_always_takes_every_hit():
    m = kvstash.RestoreCostModel(policy="always")
    m.observe_prefill(100, 0.1)
    m.observe_encode(100, 100, 1.0)
    e = m.estimate(100)
    assert e.restore_s > e.recompute_s and e.take


@pytest.mark.parametrize("kw", [{"policy": "sometimes"}, {"window": 0}, {"link_bytes_per_s": 0.0},
                                {"margin": -1.0}, {"margin": float("nan")},
                                {"link_bytes_per_s": float("inf")}])
def test_bad_options_are_refused(kw):
    with pytest.raises(kvstash.InvalidArgumentError):
        kvstash.RestoreCostModel(**kw)
