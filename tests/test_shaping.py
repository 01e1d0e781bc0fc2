"""The shaping rules (`coda.coevolve.shaping`): which potential each method's rule asks the domain for."""

from __future__ import annotations

from coda.coevolve.methods import METHODS
from coda.coevolve.shaping import PerRollout, Sparse, TrainingPrograms


class _Domain:
    def __init__(self):
        self.calls = []

    def potential(self, record, *, program=None, diagnosis=None):
        self.calls.append((record, program, diagnosis))
        return ("phi", program, diagnosis)


class _Programs:
    def training_program(self, mode_id):
        return {"id": f"tp-{mode_id}"} if mode_id else None


def test_sparse_asks_the_domain_for_nothing():
    domain = _Domain()
    assert Sparse().potential("rec", {"mode_id": "m1"}, "m1", _Programs(), domain) is None
    assert domain.calls == []


def test_per_rollout_compiles_the_rollouts_own_diagnosis():
    domain = _Domain()
    d = {"phase": "grasp", "mode_id": "m1"}
    assert PerRollout().potential("rec", d, "m2", _Programs(), domain) == ("phi", None, d)


def test_training_programs_take_the_generated_mode_first_then_the_diagnosed_one():
    rule, domain = TrainingPrograms(), _Domain()
    assert rule.potential("rec", {"mode_id": "m1"}, "m2", _Programs(), domain)[1] == {"id": "tp-m2"}
    assert rule.potential("rec", {"mode_id": "m1"}, None, _Programs(), domain)[1] == {"id": "tp-m1"}
    # no mode at all: the domain's default potential (no program)
    assert rule.potential("rec", None, None, _Programs(), domain)[1] is None


def test_which_methods_diagnose_follows_their_rule_and_memory():
    expected = {
        "sft": False,
        "domain_rand": False,
        "uniform": False,
        "sr_guided": False,
        "critic_no_memory": True,
        "coda": True,
        "gen_store_only": True,
        "train_store_only": True,
        "memory_reuse": False,  # a frozen memory learns nothing new
    }
    assert {name: m.diagnoses for name, m in METHODS.items()} == expected
    assert {name: m.shaping.name for name, m in METHODS.items()} == {
        "sft": "sparse",
        "domain_rand": "sparse",
        "uniform": "sparse",
        "sr_guided": "sparse",
        "critic_no_memory": "per_rollout",
        "coda": "programs",
        "gen_store_only": "per_rollout",
        "train_store_only": "programs",
        "memory_reuse": "programs",
    }
