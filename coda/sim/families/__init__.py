"""Task-family registry (Ravens-style): name -> family class."""

from coda.sim.families.drawer import Drawer
from coda.sim.families.pick_place import PickPlace
from coda.sim.families.push import Push
from coda.sim.families.stack import Stack

REGISTRY = {cls.name: cls for cls in (PickPlace, Stack, Drawer, Push)}
