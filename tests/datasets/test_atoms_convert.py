"""`convert_frames` against its plain form, frame by frame (tests/datasets/_atoms_reference.py),
on random blocks of every kind of frame: labels of every type a number can be read from
(Python and NumPy scalars, 0-d arrays, lists, integer and float32 arrays, Voigt / 9-value /
3x3 stress, calculator results), optional properties missing, weights and config types of
every accepted type, kept keys at both levels, and bad values of every kind anywhere in the
block (geometry and labels, several at once). The same chunk array for array, or the same
error naming the first bad frame and field."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("ase")
pytest.importorskip("vesin")

from ase import Atoms
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphbatch.datasets import AtomsKeys, emt_structures
from graphbatch.datasets._atoms import AtomsInputError
from graphbatch.datasets._atoms_convert import convert_frames
from graphbatch.datasets._extxyz import frame_from_atoms

from ._atoms_reference import convert_frames_reference
from .test_atoms_store import _assert_same_chunk, special_structures

CUTOFF = 4.0
POOL = [frame_from_atoms(k, a) for k, a in enumerate(special_structures())] + [
    frame_from_atoms(10 + k, a) for k, a in enumerate(emt_structures(6, seed=4, max_atoms=12))
]


def _energy(draw, value: float):
    kind = draw(st.sampled_from(["float", "int", "f32", "i64", "0d", "missing"]))
    return {
        "float": float(value),
        "int": int(round(value)),
        "f32": np.float32(value),
        "i64": np.int64(round(value)),
        "0d": np.array(value),
        "missing": None,
    }[kind]


def _forces(draw, forces: np.ndarray):
    kind = draw(st.sampled_from(["f64", "f32", "int", "missing"]))
    return {
        "f64": forces,
        "f32": forces.astype(np.float32),
        "int": np.round(forces).astype(np.int64),
        "missing": None,
    }[kind]


def _matrix(draw):
    kind = draw(st.sampled_from(["voigt", "voigt32", "nine", "3x3int", "missing"]))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    return {
        "voigt": rng.normal(size=6),
        "voigt32": rng.normal(size=6).astype(np.float32),
        "nine": rng.normal(size=9).tolist(),
        "3x3int": rng.integers(-3, 4, size=(3, 3)),
        "missing": None,
    }[kind]


def _weight(draw):
    return draw(
        st.sampled_from([None, 2.0, 3, np.bool_(True), np.array(0.5), np.float32(1.5), False])
    )


@st.composite
def labelled_frame(draw, k: int):
    """A frame of the pool with labels of random types, stored where MACE may find them."""
    frame = copy.deepcopy(draw(st.sampled_from(POOL)))
    frame.frame = k
    info, arrays = frame.info, frame.arrays
    energy = _energy(draw, float(info.pop("REF_energy", 0.25)))
    forces = _forces(draw, arrays.pop("REF_forces"))
    in_results = draw(st.booleans())
    for key, value, table in (
        ("REF_energy", energy, info),
        ("REF_forces", forces, arrays),
        ("REF_stress", _matrix(draw), info),
        ("REF_virials", _matrix(draw), info),
    ):
        info.pop(key, None)
        if value is not None:
            (frame.results if in_results and key != "REF_stress" else table)[key] = value
    if draw(st.booleans()):
        arrays["REF_charges"] = np.arange(len(frame)) % 3 - 1
    for key in ("config_weight", "config_energy_weight", "config_forces_weight"):
        if (w := _weight(draw)) is not None:
            info[key] = w
    ct = draw(st.sampled_from([None, "bulk", 7, np.array("slab"), np.float64(2.5)]))
    if ct is not None:
        info["config_type"] = ct
    info["task"] = draw(st.sampled_from(["a", "b"]))
    arrays["spin"] = np.full(len(frame), k, dtype=np.int32)
    info["tag"] = np.arange(2) + k
    return frame


def _break(frame, kind: str):
    """``frame`` with one bad value of ``kind``."""
    if kind == "no atoms":
        empty = frame_from_atoms(frame.frame, Atoms())
        empty.info.update(frame.info)
        return empty
    frame = copy.deepcopy(frame)
    if len(frame) == 0 and kind in ("atomic number", "position"):
        return frame
    if kind == "atomic number":
        frame.numbers = frame.numbers.copy()
        frame.numbers[-1] = 0
    elif kind == "position":
        frame.positions = frame.positions.copy()
        frame.positions[0, 1] = np.nan
    elif kind == "cell":
        frame.cell, frame.pbc = np.zeros((3, 3)), np.ones(3, bool)
    elif kind == "energy":
        frame.info["REF_energy"] = "high"
        frame.results.pop("REF_energy", None)
    elif kind == "forces":
        frame.arrays["REF_forces"] = np.full((len(frame), 3), np.inf)
    elif kind == "stress":
        frame.info["REF_stress"] = np.zeros(5)
    elif kind == "weight":
        frame.info["config_weight"] = "heavy"
    elif kind == "config type":
        frame.info["config_type"] = np.array(["a", "b"])
    elif kind == "keep":
        frame.arrays.pop("spin", None)
    return frame


BREAKS = [
    "no atoms",
    "atomic number",
    "position",
    "cell",
    "energy",
    "forces",
    "stress",
    "weight",
    "config type",
    "keep",
]


@st.composite
def blocks(draw):
    n = draw(st.integers(1, 8))
    frames = [draw(labelled_frame(k)) for k in range(n)]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, n - 1))
        frames[at] = _break(frames[at], draw(st.sampled_from(BREAKS)))
    keys = AtomsKeys(
        required=draw(st.sampled_from([(), ("energy",), ("energy", "forces")])),
        keep=draw(st.sampled_from([(), ("spin",), ("spin", "tag")])),
        head_key=draw(st.sampled_from([None, "task"])),
        config_type_weights=draw(st.sampled_from([{}, {"bulk": 2.0, "7": 0.5, "slab": 3.0}])),
    )
    return frames, keys


def _convert(convert, frames, keys):
    try:
        return convert(frames, cutoff=CUTOFF, keys=keys, source=3, where="set.xyz")
    except AtomsInputError as exc:
        return str(exc)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(blocks())
def test_convert_frames_equals_the_frame_by_frame_reference(block):
    frames, keys = block
    got = _convert(convert_frames, frames, keys)
    want = _convert(convert_frames_reference, frames, keys)
    if isinstance(want, str):
        assert got == want
    else:
        assert not isinstance(got, str), got
        _assert_same_chunk(got, want)


def test_every_kind_of_frame_and_every_bad_value_is_converted_as_the_reference():
    """Deterministic cover of the property test: every label type in one block, then each
    pair of bad values -- in one frame (the first in check order is named) and in the next."""
    frames = []
    for k, frame in enumerate(POOL * 2):
        frame = copy.deepcopy(frame)
        frame.frame = k
        kinds = [float(k), k, np.float32(k), np.int64(k), np.array(k / 2)]
        frame.info["REF_energy"] = kinds[k % len(kinds)]
        forces = frame.arrays["REF_forces"]
        frame.arrays["REF_forces"] = [forces, forces.astype(np.float32), forces.round()][k % 3]
        frame.info["REF_stress"] = [np.arange(6.0), list(range(9)), np.eye(3, dtype=int)][k % 3]
        frame.info["config_weight"] = [2, np.bool_(True), np.array(0.5), 1.5][k % 4]
        frame.info["config_type"] = ["bulk", 7, np.array("slab")][k % 3]
        frame.arrays["spin"] = np.zeros(len(frame))
        if k % 4 == 1:
            frame.results["REF_energy"] = frame.info.pop("REF_energy")
        if k % 5 == 2:
            del frame.arrays["REF_forces"]
        frames.append(frame)
    keys = AtomsKeys(required=("energy",), keep=("spin",), config_type_weights={"7": 2.0})
    got = convert_frames(frames, cutoff=CUTOFF, keys=keys, source=0, where="set.xyz")
    want = convert_frames_reference(frames, cutoff=CUTOFF, keys=keys, source=0, where="set.xyz")
    _assert_same_chunk(got, want)
    assert got.present["stress"] == len(frames) and 0 < got.present["forces"] < len(frames)
    named = set()
    for kind in BREAKS:
        for other in BREAKS:
            for second in (3, 4):
                bad = list(frames)
                bad[3] = _break(_break(bad[3], kind), other) if second == 3 else bad[3]
                if second == 4:
                    bad[3], bad[4] = _break(bad[3], kind), _break(bad[4], other)
                want = _convert(convert_frames_reference, bad, keys)
                assert isinstance(want, str), (kind, other)
                assert _convert(convert_frames, bad, keys) == want, (kind, other, second)
                named.add(want.split(": ")[2])
    assert len(named) == len(BREAKS), named  # each kind of bad value was the one named


@pytest.mark.parametrize("other", ["plain", "float32 forces"])
def test_a_weight_or_config_type_that_is_text_is_refused_whatever_else_the_block_holds(other):
    """An ASE database can hold ``config_weight="2"`` or ``config_type=None``: one line naming
    the frame, whether or not another frame of the block is out of the ordinary (the old block
    path took them where every frame was plain, the frame-by-frame path refused them)."""
    for key, value, expect in (
        ("config_weight", "2", "config_weight: a weight is one number, got '2'"),
        ("config_type", None, "config_type: a config type is one name, got 'None'"),
    ):
        frames = copy.deepcopy(POOL[:3])
        frames[1].info[key] = value
        if other != "plain":
            frames[2].arrays["REF_forces"] = frames[2].arrays["REF_forces"].astype(np.float32)
        with pytest.raises(AtomsInputError, match=f"frame 1: {expect}"):
            convert_frames(frames, cutoff=CUTOFF, keys=AtomsKeys(), source=0, where="db")
