"""What crosses the loop's boundary is typed: every signature of the `Domain` interfaces (`coda/coevolve/domain.py`)
names its types (`BuiltEnv`, `RecordedRollout`, `ProgramDoc`, ...), with no ``Any`` and no bare ``dict``; both
domains implement every method of every interface."""

from __future__ import annotations

import inspect
import re

from coda.coevolve import domain as D

INTERFACES = (D.Environments, D.Episodes, D.Diagnosis, D.Shaping, D.Domain, D.GeneratorSpace)


def _signatures() -> dict[str, list[str]]:
    out = {}
    for proto in INTERFACES:
        for name, fn in vars(proto).items():
            if inspect.isfunction(fn):
                out[f"{proto.__name__}.{name}"] = [str(a) for a in fn.__annotations__.values()]
        for name, ann in vars(proto).get("__annotations__", {}).items():
            out[f"{proto.__name__}.{name}"] = [str(ann)]
    return out


def _untyped(annotation: str) -> bool:
    """``Any`` anywhere, or ``dict`` without its key and value types."""
    return bool(re.search(r"\bAny\b", annotation) or re.search(r"\bdict\b(?!\[)", annotation))


def test_the_checker_finds_an_untyped_signature():
    assert _untyped("dict[str, Any]") and _untyped("dict | None") and _untyped("list[dict]")
    assert not _untyped("Mapping[str, JSON]") and not _untyped("BuiltEnv | None")


def test_no_any_or_bare_dict_in_the_domain_interfaces():
    sigs = _signatures()
    assert len(sigs) >= 20, sorted(sigs)
    bad = {k: v for k, v in sigs.items() if any(_untyped(a) for a in v)}
    assert not bad, f"untyped signatures: {bad}"


def _methods(*protocols) -> set[str]:
    return {n for proto in protocols for n, f in vars(proto).items() if inspect.isfunction(f)}


def test_both_domains_implement_every_interface_method():
    """Both are a `Domain`; PyBullet's scenes form one generator space (`GeneratorSpace.region`), LIBERO's
    variants do not, and it simply lacks that capability."""
    from coda.domains import domain_class

    needed = {"pybullet": INTERFACES, "libero": INTERFACES[:-1]}
    for name, protocols in needed.items():
        cls = domain_class(name)
        missing = sorted(m for m in _methods(*protocols) if not callable(getattr(cls, m, None)))
        assert not missing, f"{name}: {missing}"
    assert not hasattr(domain_class("libero"), "region")
