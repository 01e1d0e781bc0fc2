"""Task-family registry (Ravens-style): name -> family class, in the order of the one list of families
(`coda.config.sections.FAMILIES`, which params.yaml is validated against)."""

from coda.config.sections import FAMILIES
from coda.sim.families.drawer import Drawer
from coda.sim.families.pick_place import PickPlace
from coda.sim.families.push import Push
from coda.sim.families.stack import Stack

_CLASSES = {cls.name: cls for cls in (PickPlace, Stack, Drawer, Push)}
if set(_CLASSES) != set(FAMILIES):  # a new family is a class here and a name in coda.config.sections.FAMILIES
    raise ImportError(
        f"family classes {sorted(_CLASSES)} differ from coda.config.sections.FAMILIES {FAMILIES}"
    )
REGISTRY = {name: _CLASSES[name] for name in FAMILIES}
