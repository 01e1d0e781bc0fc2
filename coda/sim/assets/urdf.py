"""A tiny URDF writer for links made of boxes, with stable number formatting (byte-identical files)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _f(x: float) -> str:
    s = f"{float(x):.5f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _v(xs: Sequence[float]) -> str:
    return " ".join(_f(x) for x in xs)


class _Urdf:
    """Tiny URDF writer for links made of boxes."""

    def __init__(self, name: str) -> None:
        self.lines = ['<?xml version="1.0"?>', f'<robot name="{name}">']
        self.materials: dict[str, tuple[float, ...]] = {}

    def material(self, name: str, rgba: Sequence[float]) -> None:
        self.materials[name] = tuple(rgba)
        self.lines.append(f'  <material name="{name}"><color rgba="{_v(rgba)}"/></material>')

    def link(self, name: str, mass: float, boxes: list[tuple[tuple, tuple, str]]) -> None:
        """boxes: (centre xyz, full size xyz, material name)."""
        lo = np.min([np.array(c) - np.array(s) / 2 for c, s, _ in boxes], axis=0)
        hi = np.max([np.array(c) + np.array(s) / 2 for c, s, _ in boxes], axis=0)
        com, size = (lo + hi) / 2, hi - lo
        ixx = mass * (size[1] ** 2 + size[2] ** 2) / 12
        iyy = mass * (size[0] ** 2 + size[2] ** 2) / 12
        izz = mass * (size[0] ** 2 + size[1] ** 2) / 12
        L = self.lines
        L.append(f'  <link name="{name}">')
        L.append("    <inertial>")
        L.append(f'      <origin xyz="{_v(com)}" rpy="0 0 0"/>')
        L.append(f'      <mass value="{_f(mass)}"/>')
        L.append(f'      <inertia ixx="{ixx:.6e}" ixy="0" ixz="0" iyy="{iyy:.6e}" iyz="0" izz="{izz:.6e}"/>')
        L.append("    </inertial>")
        for c, s, mat in boxes:
            geo = f'<origin xyz="{_v(c)}" rpy="0 0 0"/><geometry><box size="{_v(s)}"/></geometry>'
            L.append(f'    <visual>{geo}<material name="{mat}"/></visual>')
            L.append(f"    <collision>{geo}</collision>")
        L.append("  </link>")

    def joint(self, name, jtype, parent, child, xyz, axis=None, limits=None, damping=0.0, friction=0.0):
        L = self.lines
        L.append(f'  <joint name="{name}" type="{jtype}">')
        L.append(f'    <parent link="{parent}"/><child link="{child}"/>')
        L.append(f'    <origin xyz="{_v(xyz)}" rpy="0 0 0"/>')
        if axis is not None:
            L.append(f'    <axis xyz="{_v(axis)}"/>')
        if limits is not None:
            lo, hi, effort, vel = limits
            L.append(
                f'    <limit lower="{_f(lo)}" upper="{_f(hi)}" effort="{_f(effort)}" velocity="{_f(vel)}"/>'
            )
            L.append(f'    <dynamics damping="{_f(damping)}" friction="{_f(friction)}"/>')
        L.append("  </joint>")

    def text(self) -> str:
        return "\n".join([*self.lines, "</robot>", ""])
