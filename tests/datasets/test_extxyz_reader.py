"""The fast extxyz reader (`graphbatch.datasets._extxyz`) against ``ase.io.iread``, frame by
frame: numbers, positions, cell, pbc, ``info``, ``arrays`` and calculator results equal in
value, type and dtype -- on every frame of a generated EMT set and on edge cases (quoting,
Lattice/pbc variations, Properties with strings/ints/bools, whitespace, calculator keys);
its comment-line parser against ASE's ``key_val_str_to_dict`` on generated lines; frames it
leaves to ASE; and malformed input through the build: one line naming file, frame, line and
field."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("ase")
pytest.importorskip("vesin")
import ase.io
from ase.io.extxyz import key_val_str_to_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from graphbatch.datasets import emt_structures
from graphbatch.datasets._extxyz import frame_from_atoms, parse_comment, read_frames


def _same(a, b) -> bool:
    """Equal values of the same types (arrays: same dtype and shape; NaN equals NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            type(a) is type(b)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if type(a) is not type(b):
        return False
    return a == b or (a != a and b != b)


def _frames_of(text: str):
    """``read_frames`` over ``text`` (None where it leaves a frame to ASE), and ASE's frames."""
    lines = text.split("\n")
    starts, at = [], 0
    while at < len(lines) and lines[at].strip():
        starts.append(at)
        at += int(lines[at]) + 2
    mine = read_frames(lines, starts, 0)
    theirs = list(ase.io.iread(io.StringIO(text), index=":", format="extxyz"))
    assert len(mine) == len(theirs) == len(starts)
    return mine, theirs


def _assert_as_ase(text: str, *, read: int | None = None) -> list:
    mine, theirs = _frames_of(text)
    for k, (m, atoms) in enumerate(zip(mine, theirs, strict=False)):
        if m is None:
            continue
        want = frame_from_atoms(k, atoms)
        assert m.frame == k
        for name in ("numbers", "positions", "cell", "pbc", "info", "arrays", "results"):
            assert _same(getattr(m, name), getattr(want, name)), (
                k,
                name,
                getattr(m, name),
                getattr(want, name),
            )
    if read is not None:
        assert [m is not None for m in mine] == [True] * read, [m is None for m in mine]
    return mine


def _write(frames) -> str:
    buf = io.StringIO()
    ase.io.write(buf, frames, format="extxyz")
    return buf.getvalue()


def test_every_frame_of_the_emt_set_reads_as_ase_reads_it():
    """Bulk cells, slabs, clusters (no Lattice), one-atom cells; MACE's REF_ keys."""
    frames = list(emt_structures(60, seed=11, max_atoms=48))
    for k, a in enumerate(frames):
        a.info["config_weight"] = 0.5 + k % 3
        a.info["flags"] = [True, False, k % 2 == 0]
    text = _write(frames)
    _assert_as_ase(text, read=len(frames))


def test_calculator_results_as_ase_moves_them():
    """``energy``/``forces``/``stress`` (and other calculator names) go to the results, as
    ASE's reader puts them in a SinglePointCalculator; stress 3x3 -> Voigt."""
    from ase.build import bulk
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(0)
    out = []
    for _ in range(4):
        a = bulk("Cu", "fcc", a=3.6, cubic=True)
        a.calc = SinglePointCalculator(
            a,
            energy=float(rng.normal()),
            forces=rng.normal(size=(4, 3)),
            stress=rng.normal(size=6),
            magmom=0.5,
            charges=rng.normal(size=4),
        )
        a.arrays["tags_custom"] = np.arange(4, dtype=np.int32)
        out.append(a)
    _assert_as_ase(_write(out), read=4)


EDGE = [
    # quoted strings with spaces and special characters inside the quotes
    "1\nProperties=species:S:1:pos:R:3 comment=\"hello world = 1, 2 {x} [y] 'q'\" e=1.5\n"
    "Cu 0 0 0\n",
    # a key without a value, duplicate keys, uid (unprocessed), integers and float forms
    "1\nProperties=species:S:1:pos:R:3 have_energy uid=0012 n=+5 m=007 a=1_000 b=.5 c=5. "
    "d=1e-3 e=-2E+4 f=nan g=inf h=1 h=2 i=1,2,3\nCu 0 0 0\n",
    # Lattice of integers, pbc variations
    '1\nLattice="10 0 0 0 10 0 0 0 10" Properties=species:S:1:pos:R:3\nAl 1 1 1\n',
    '1\nLattice="10 0 0 0 10 0 0 0 10" pbc="T T F" Properties=species:S:1:pos:R:3\nAl 1 1 1\n',
    '1\nLattice="10 0 0 0 10 0 0 0 10" pbc="F F F" Properties=species:S:1:pos:R:3\nAl 1 1 1\n',
    '1\nLattice="10 0 0 0 10 0 0 0 10" pbc=T Properties=species:S:1:pos:R:3\nAl 1 1 1\n',
    '1\npbc="T T T" Properties=species:S:1:pos:R:3\nAl 1 1 1\n',
    '1\nlattice="10 0 0 0 10 0 0 0 10" Properties=species:S:1:pos:R:3\nAl 1 1 1\n',
    # Properties with strings, ints, bools and several columns; lower-case species
    '2\nLattice="5 0 0 0 5 0 0 0 5" Properties=species:S:1:pos:R:3:tag:I:1:label:S:1:'
    "fix:L:1:vel:R:3:flags:L:2:ids:I:2\n"
    "cu 0 0 0 3 alpha T 0.1 0.2 0.3 T F 1 2\n"
    "AG 1.5 1.5 1.5 -4 beta False 1e-3 2 3 True False -1 0\n",
    # whitespace: leading/trailing spaces and tabs, several spaces, CRLF line ends
    "  2  \n   Properties=species:S:1:pos:R:3 \t energy=-1.25\t  config_type=bulk   \r\n"
    "\tPt   0.0   0.0   0.0   \r\n  Pt 1.0\t1.0 1.0\r\n",
    # an empty comment line, a free-text comment line
    "1\n\nCu 0 0 0\n",
    "1\nCubic bulk copper cell\nCu 0 0 0\n",
    # a stress of 9 values (3x3 in Fortran order -> Voigt in the results), virial, JSON
    '1\nLattice="4 0 0 0 4 0 0 0 4" stress="1 2 3 2 5 6 3 6 9" virial="1 0 0 0 1 0 0 0 1" '
    'data="_JSON [1, 2, 3]" Properties=species:S:1:pos:R:3:forces:R:3:charge:R:1 '
    "energy=3\nNi 0 0 0 0.1 0.2 0.3 -0.5\n",
    # a dummy atom (X is 0 for ASE), booleans in many spellings
    '1\nProperties=species:S:1:pos:R:3 a=T b=F c=true d=False e=TRUE f="T F T"\nX 0 0 0\n',
]

#: comment lines parsed by ASE's own key_val_str_to_dict (single quotes, braces, brackets,
#: escapes, spaces around "=", non-ASCII); the frames are still read here
ASE_COMMENTS = [
    "1\nProperties=species:S:1:pos:R:3 name='a b'\nCu 0 0 0\n",
    "1\nProperties=species:S:1:pos:R:3 v={1 2 3} w=[4 5]\nCu 0 0 0\n",
    '1\nProperties=species:S:1:pos:R:3 s="say \\"hi\\""\nCu 0 0 0\n',
    "1\nProperties=species:S:1:pos:R:3 key = value\nCu 0 0 0\n",
    "1\nProperties=species:S:1:pos:R:3 é=1\nCu 0 0 0\n",
    "1\nLattice=[4 0 0 0 4 0 0 0 4] Properties=species:S:1:pos:R:3\nCu 0 0 0\n",
]

#: frames the reader leaves to ASE (the result is still ASE's)
LEFT = [
    # an atom line with an extra column (ASE ignores it), atomic numbers instead of species
    "1\nProperties=species:S:1:pos:R:3\nCu 0 0 0 7\n",
    "1\nProperties=Z:I:1:pos:R:3\n29 0 0 0\n",
    # a logical column ASE reads as False, a Properties entry ASE treats specially
    "1\nProperties=species:S:1:pos:R:3:fix:L:1\nCu 0 0 0 maybe\n",
    "1\nProperties=species:S:1:pos:R:3:move_mask:L:1\nCu 0 0 0 T\n",
]


@pytest.mark.parametrize("text", EDGE, ids=range(len(EDGE)))
def test_edge_cases_read_as_ase_reads_them(text):
    _assert_as_ase(text, read=1)


@pytest.mark.parametrize("text", ASE_COMMENTS, ids=range(len(ASE_COMMENTS)))
def test_comment_lines_parsed_by_ase(text):
    _assert_as_ase(text, read=1)


@pytest.mark.parametrize("text", LEFT, ids=range(len(LEFT)))
def test_frames_left_to_ase(text):
    mine, _ = _frames_of(text)
    assert mine == [None]


def test_a_block_mixing_plain_and_unusual_frames():
    """Frames read here and frames left to ASE, interleaved, with changing Properties."""
    text = "".join([EDGE[0], LEFT[0], EDGE[8], EDGE[8], LEFT[2], EDGE[1], EDGE[3]])
    mine = _assert_as_ase(text)
    assert [m is None for m in mine] == [False, True, False, False, True, False, False]


_KEY = st.text(alphabet="abcXYZ_0-.:!#$|~", min_size=1, max_size=5)
_VALUE = st.one_of(
    st.sampled_from(
        [
            "T",
            "F",
            "True",
            "false",
            "TRUE",
            "1",
            "-2",
            "+3",
            "1.5",
            ".5",
            "5.",
            "1e3",
            "nan",
            "inf",
            "1_0",
            "0x10",
            "bulk",
            "_JSON",
            "a,b",
            "1,2",
        ]
    ),
    st.text(alphabet="abT F019.,-+e_:", min_size=0, max_size=8),
)
_SEP = st.sampled_from([" ", "  ", "\t", " \t "])


@st.composite
def _comment_lines(draw):
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(_KEY)
        form = draw(st.integers(0, 3))
        value = draw(_VALUE)
        if form == 0:
            parts.append(key)
        elif form == 1 and value and " " not in value and "\t" not in value:
            parts.append(f"{key}={value}")
        else:
            parts.append(f'{key}="{value}"')
        parts.append(draw(_SEP))
    return draw(_SEP) + "".join(parts)


@settings(max_examples=400, deadline=None)
@given(_comment_lines())
def test_parse_comment_equals_ase_key_val_str_to_dict(line):
    _check_comment(line)


def _check_comment(line: str) -> None:
    """`parse_comment` gives what ASE's frame reader gets from ``key_val_str_to_dict`` (which
    it calls only for a non-empty stripped line), or raises the same exception type."""
    try:
        want = key_val_str_to_dict(line.strip()) if line.strip() else {}
    except Exception as exc:
        with pytest.raises(type(exc)):
            parse_comment(line)
        return
    assert _same(parse_comment(line), want), (line, parse_comment(line), want)


@pytest.mark.parametrize(
    "line",
    [
        'Lattice="1 0 0 0 1 0 0 0 1" Properties=species:S:1:pos:R:3 energy=-3.2 pbc="T T T"',
        "a=1 b=2.5 c=x d",
        'x="1 2 3" y="T F" z="1.5 2"',
        "uid=0001",
        'stress="1 2 3 4 5 6 7 8 9"',
        'j="_JSON [[1, 2], [3, 4]]"',
        'k="_JSON [\\"a\\"]"',
        "n=99999999999999999999999",
        "",
        "   ",
        "e=1e400 f=-0 g=-0.0",
    ],
)
def test_parse_comment_on_chosen_lines(line):
    _check_comment(line)
