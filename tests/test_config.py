"""Settings: Dask config keys under ``interdist`` (interdist.yaml, interdist-schema.yaml, docs/settings.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import numpy as np
import pytest
import yaml

import interdist as idist
from interdist import config

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = yaml.safe_load((ROOT / "interdist" / "interdist.yaml").read_text())
SCHEMA = yaml.safe_load((ROOT / "interdist" / "interdist-schema.yaml").read_text())
DOCS = (ROOT / "docs" / "settings.md").read_text()
OLD_VARIABLES = sorted({var for _, old in config.KEYS.values() for var in old})


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{name}."))
        else:
            out[prefix + name] = value
    return out


def _schema_keys(node: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, sub in node.get("properties", {}).items():
        if sub.get("type") == "object":
            out.update(_schema_keys(sub, f"{prefix}{name}."))
        else:
            out[prefix + name] = sub
    return out


FLAT_DEFAULTS = _flatten(DEFAULTS["interdist"])
SCHEMA_KEYS = _schema_keys(SCHEMA["properties"]["interdist"])


@pytest.fixture
def no_old_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """None of the INTERDIST_* variables set, and their warnings not yet given."""
    for var in OLD_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    warned = set(config._warned)
    config._warned.clear()
    yield
    config._warned.clear()
    config._warned.update(warned)


# --- one set of keys, in the defaults, the schema, the code and the docs ----------------------------


def test_defaults_schema_and_code_name_the_same_keys() -> None:
    assert set(FLAT_DEFAULTS) == set(SCHEMA_KEYS) == set(config.KEYS)


def test_the_defaults_follow_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(DEFAULTS, SCHEMA)
    kinds = {int: "integer", float: "number", bool: "boolean", str: "string"}
    for key, (kind, _) in config.KEYS.items():
        types = SCHEMA_KEYS[key]["type"]
        assert kinds[kind] in (types if isinstance(types, list) else [types]), key
        assert SCHEMA_KEYS[key].get("description"), f"interdist.{key} has no description in the schema"


def test_a_wrong_value_fails_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"interdist": {"collectives": {"timeout": "soon"}}}, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"interdist": {"collectives": {"timeuot": 5}}}, SCHEMA)


def _doc_rows() -> dict[str, list[str]]:
    rows = {}
    for line in DOCS.splitlines():
        m = re.match(r"\|\s*`interdist\.([a-z0-9.-]+)`\s*\|", line)
        if m:
            rows[m.group(1)] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return rows


def test_every_key_is_documented_with_its_default_and_old_variable() -> None:
    rows = _doc_rows()
    assert set(rows) == set(config.KEYS), "docs/settings.md: a row `| `interdist.<key>` | ...` for every key"
    for key, (_, old) in config.KEYS.items():
        _, default_cell, old_cell, read_cell, what = rows[key][:5]
        default = FLAT_DEFAULTS[key]
        shown = "null" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        assert f"`{shown}`" in default_cell, (key, default_cell)
        for var in old:
            assert f"`{var}`" in old_cell, (key, old_cell)
        if not old:
            assert old_cell in ("", "-", "—"), (key, old_cell)
        assert read_cell and what, key


def test_the_docs_name_no_old_variable_that_is_not_read() -> None:
    named = set(re.findall(r"`(INTERDIST_[A-Z_]+)`", DOCS))
    internal = {"INTERDIST_GPU"}  # set by interdist in its GPU workers' environment, not a setting
    assert named - internal == set(OLD_VARIABLES)


# --- reading ------------------------------------------------------------------------------------------


def test_defaults_are_loaded(no_old_variables: None) -> None:
    assert dask.config.get("interdist.collectives.timeout") == 60
    assert config.get("collectives.timeout") == 60.0 and isinstance(config.get("collectives.timeout"), float)
    assert config.get("cluster.embedded-tls") is True
    assert config.get("cluster.worker-log") is None
    assert config.snapshot() == {key: config.get(key) for key in config.KEYS}


def test_dask_config_set_changes_the_value(no_old_variables: None) -> None:
    with dask.config.set({"interdist.collectives.timeout": 5, "interdist.replica.inline-bytes": "128"}):
        assert config.get("collectives.timeout") == 5.0
        assert idist.config.settings.collective_timeout == 5.0
        assert idist.config.get_collective_timeout() == 5.0
        assert config.get("replica.inline-bytes") == 128  # of the key's type
    assert config.get("collectives.timeout") == 60.0


def test_the_settings_attributes_set_the_keys(no_old_variables: None) -> None:
    before = config.settings.stuck_grace
    config.settings.stuck_grace = 2.5
    try:
        assert dask.config.get("interdist.liveness.stuck-grace") == 2.5
        assert config.get("liveness.stuck-grace") == 2.5
    finally:
        config.settings.stuck_grace = before


def test_a_wrong_value_names_its_key(no_old_variables: None) -> None:
    with (
        dask.config.set({"interdist.collectives.timeout": "soon"}),
        pytest.raises(ValueError, match=r"interdist\.collectives\.timeout"),
    ):
        config.get("collectives.timeout")
    with pytest.raises(KeyError, match=r"docs/settings\.md"):
        config.get("collectives.timeuot")


def test_the_environment_spelling_of_dask() -> None:
    code = (
        "import interdist, json; c = interdist.config; "
        "print(json.dumps([c.get('collectives.timeout'), c.get('cluster.worker-log'),"
        " c.get('input.direct-reads')]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in OLD_VARIABLES}
    env.update(
        {
            config.env_name("collectives.timeout"): "7",
            config.env_name("cluster.worker-log"): "-",
            config.env_name("input.direct-reads"): "False",
        }
    )
    assert config.env_name("cluster.worker-log") == "DASK_INTERDIST__CLUSTER__WORKER_LOG"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT, timeout=120
    )
    assert json.loads(out.stdout) == [7.0, "-", False]
    assert "Warning" not in out.stderr, out.stderr


# --- the variables of earlier versions ----------------------------------------------------------------


def test_an_old_variable_wins_with_a_deprecation_warning(
    no_old_variables: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERDIST_COLLECTIVE_TIMEOUT", "9")
    with dask.config.set({"interdist.collectives.timeout": 5}):
        with pytest.warns(
            DeprecationWarning,
            match=r"INTERDIST_COLLECTIVE_TIMEOUT .*interdist\.collectives\.timeout"
            r".*DASK_INTERDIST__COLLECTIVES__TIMEOUT",
        ) as caught:
            assert config.get("collectives.timeout") == 9.0
        # shown as the caller's: the first frame outside interdist (a notebook's cell is __main__)
        assert caught[0].filename == __file__
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert config.settings.collective_timeout == 9.0  # once per variable
    monkeypatch.setenv("INTERDIST_LOCAL_CONTROL", "0")
    with pytest.warns(DeprecationWarning, match="INTERDIST_LOCAL_CONTROL"):
        assert config.get("cluster.local-control") is False
    monkeypatch.setenv("INTERDIST_COLLECTIVES", "local")  # the older name of INTERDIST_COLLECTIVES_BACKEND
    with pytest.warns(DeprecationWarning, match=r"INTERDIST_COLLECTIVES is deprecated.*collectives\.backend"):
        assert config.get("collectives.backend") == "local"
    monkeypatch.setenv("INTERDIST_RS_MIN_ELEMENTS", "")  # empty: not set, as before
    assert config.get("collectives.rs-min-elements") is None


def test_old_variables_read_at_import_still_apply() -> None:
    """The thresholds are read when their module is imported, by the old names too (in a fresh process)."""
    code = (
        "import json, warnings; warnings.simplefilter('always')\n"
        "from interdist.collectives import algorithms as a, shared_memory as s\n"
        "print(json.dumps([a.RB_MIN_ELEMENTS_ONE_HOST, a.RS_MIN_ELEMENTS]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in OLD_VARIABLES}
    env.update({"INTERDIST_RB_MIN_ELEMENTS_ONE_HOST": "1000", config.env_name("collectives.rs-min-elements"): "77"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=ROOT, timeout=120
    )
    assert json.loads(out.stdout.splitlines()[-1]) == [1000, 77]
    assert "DeprecationWarning: the environment variable INTERDIST_RB_MIN_ELEMENTS_ONE_HOST" in out.stderr


# --- the replicas get the notebook's values -----------------------------------------------------------


def _read_on_replica() -> Any:
    from interdist import config as replica_config

    return np.array(
        [replica_config.get("input.timeout"), replica_config.get("replica.lazy-merge-min-bytes"), os.getpid()]
    )


def test_a_value_set_in_the_notebook_reaches_the_replicas(no_old_variables: None) -> None:
    with dask.config.set({"interdist.input.timeout": 123.0, "interdist.replica.lazy-merge-min-bytes": 4321}):
        strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    try:
        got = [np.asarray(h) for h in strategy.experimental_local_results(strategy.run(_read_on_replica))]
        assert [g[:2].tolist() for g in got] == [[123.0, 4321.0]] * 2
        assert os.getpid() not in {int(g[2]) for g in got}, "the replicas run in worker processes"
    finally:
        strategy.close()
    # the next strategy's replicas get the notebook's values of then (the defaults again)
    strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    try:
        got = [np.asarray(h) for h in strategy.experimental_local_results(strategy.run(_read_on_replica))]
        assert [g[:2].tolist() for g in got] == [[300.0, 65536.0]] * 2
    finally:
        strategy.close()
