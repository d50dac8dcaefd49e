"""Hand-edited tune result files (issue 37): `graphbatch report --tune` and `TuneResult.load`
give one line naming the file and the key for every malformed file -- never a KeyError or
TypeError traceback -- and still read a file with keys they do not know."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import graphbatch as gb
from graphbatch._errors import InputError
from graphbatch.cli import main
from graphbatch.tuning import SimulatedBackend, TuneResult


@pytest.fixture(scope="module")
def result() -> dict:
    rng = np.random.default_rng(3)
    n = rng.integers(3, 30, size=400)
    sizes = gb.GraphSizes(n, (n * (n - 1) * 0.7).astype(np.int64))
    be = SimulatedBackend(
        sizes,
        lambda n, e, g, m: 1.0 + 0.003 * e + 0.01 * n,
        memory_bytes=lambda n, e, g, m: 1000 + n + e,
        modes=("compiled", "eager"),
    )
    res = gb.tune(
        None, backend=be, batch_size=24, epochs=2, probes=4, rounds=1, validate=1, validate_steps=2
    )
    return json.loads(json.dumps(res.as_dict()))


def _set(path: str, value):
    """An edit: set the key at ``path`` (dots and [i]) to ``value``; ``...`` deletes it."""

    def edit(d: dict) -> None:
        parts = path.replace("[", ".").replace("]", "").split(".")
        for p in parts[:-1]:
            d = d[int(p)] if isinstance(d, list) else d[p]
        last = parts[-1]
        if value is ...:
            del d[last]
        elif isinstance(d, list):
            d[int(last)] = value
        else:
            d[last] = value

    return edit


#: hand edits -> the key the one-line message must name
EDITS = {
    "no models": (_set("models", ...), "models"),
    "no ranking": (_set("ranking", ...), "ranking"),
    "no request": (_set("request", ...), "request"),
    "no mode": (_set("mode", ...), "mode"),
    "no world_size": (_set("world_size", ...), "world_size"),
    "empty ranking": (_set("ranking", []), "ranking"),
    "empty models": (_set("models", {}), "models"),
    "models a list": (_set("models", []), "models"),
    "request a list": (_set("request", [1]), "request"),
    "request without strategy": (_set("request.strategy", ...), "request.strategy"),
    "world_size text": (_set("world_size", "two"), "world_size"),
    "ranking entry without epoch_ps": (_set("ranking[0].epoch_ps", ...), "ranking[0].epoch_ps"),
    "epoch_ps text": (_set("ranking[1].epoch_ps", "fast"), "ranking[1].epoch_ps"),
    "feasible text": (_set("ranking[0].feasible", "yes"), "ranking[0].feasible"),
    "ranking entry a number": (_set("ranking[0]", 5), "ranking[0]"),
    "model without time": (_set("models.compiled.time", ...), "models.compiled.time"),
    "model a list": (_set("models.eager", [1, 2]), "models.eager"),
    "coef too short": (_set("models.compiled.time.coef", [1]), "models.compiled.time.coef"),
    "unknown feature": (
        _set("models.compiled.time.features", ["n_atoms"]),
        "models.compiled.time.features",
    ),
    "zero units": (_set("models.compiled.time.units", 0), "models.compiled.time.units"),
    "infinite intercept": (
        _set("models.compiled.time.intercept", float("inf")),
        "models.compiled.time.intercept",
    ),
    "memory text": (_set("models.compiled.memory", "lots"), "models.compiled.memory"),
    "compile without first_ms": (
        _set("models.eager.compile.first_ms", ...),
        "models.eager.compile.first_ms",
    ),
    "probe shape of two": (
        _set("models.compiled.probes[0].shape", [1, 2]),
        "models.compiled.probes[0].shape",
    ),
    "probe step_ms text": (
        _set("models.compiled.probes[0].step_ms", "abc"),
        "models.compiled.probes[0].step_ms",
    ),
    "probes an object": (_set("models.compiled.probes", {}), "models.compiled.probes"),
    "validation an object": (_set("validation", {"a": 1}), "validation"),
    "validation row a number": (_set("validation[0]", 1), "validation[0]"),
    "settings a list": (_set("settings", []), "settings"),
    "tolerance text": (_set("settings.batch_tolerance", "10%"), "settings.batch_tolerance"),
}


@pytest.fixture(scope="module")
def sizes_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sizes") / "sizes.npz"
    n = np.random.default_rng(0).integers(3, 20, size=120)
    return str(gb.GraphSizes(n, n * (n - 1) // 2).save(path))


@pytest.mark.parametrize("case", sorted(EDITS))
def test_every_malformed_result_is_one_line_naming_file_and_key(
    result, tmp_path, capsys, sizes_file, case
):
    edit, key = EDITS[case]
    d = copy.deepcopy(result)
    edit(d)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match=r"edited\.json: key ") as got:
        TuneResult.load(path)
    assert f"key {key}" in str(got.value), str(got.value)
    capsys.readouterr()
    out = tmp_path / "r.html"
    rc = main(["report", sizes_file, "--tune", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "edited.json" in err and f"key {key}" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "text, expect",
    [("[1, 2]", "a tune result is a JSON object"), ("{", "not valid JSON"), ("[" * 100_000, "nested")],
)
def test_files_that_are_no_result_name_the_file(tmp_path, text, expect):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"r\.json'?: .*{expect}"):
        TuneResult.load(path)


def test_a_result_with_keys_the_reader_does_not_know_still_reads(result, tmp_path):
    d = copy.deepcopy(result)
    d["written_by"] = "a newer graphbatch"
    d["ranking"][0]["break_even_epochs"] = 3.5
    d["models"]["compiled"]["note"] = {"any": ["thing"]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    back = TuneResult.load(path)
    assert back.request == result["request"] and len(back.ranking) == len(result["ranking"])
    assert back.table(3)[0]["config"] == result["ranking"][0]["label"]
