"""The tuning-database functions: default path, check, merge, explain, and a
context that follows a merged record."""
import json

import numpy as np
import pytest

import oclfuse
from conftest import assert_close, rand, value


def record(path="unfused", wgs=8):
    return {"op": "rms_norm", "dtype": "f32", "shape": {"rows": 8, "cols": 64},
            "choice": {"path": path, "params": {"WGS": wgs}}, "time_ns": 1000}


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert oclfuse.tuning_db_default_path() == str(tmp_path / "oclfuse" / "tuning.json")


def test_merge_check_explain(ctx, tmp_path, rng):
    db = tmp_path / "sub" / "db.json"
    oclfuse.tuning_db_merge(db, [record()], ctx=ctx)
    assert oclfuse.tuning_db_check(db) == 1
    doc = json.loads(db.read_text())
    assert doc["records"][0]["device"]["name"] in ctx.fingerprint
    oclfuse.tuning_db_merge(db, json.dumps([record(wgs=16)]), ctx=ctx)  # same key: replaced
    assert oclfuse.tuning_db_check(db) == 1
    c = oclfuse.Context(ctx.queue, tuning_db=db)
    try:
        text = oclfuse.tuning_explain("rms_norm", "f32", [8, 64], ctx=c)
        decision = text[text.index("uses: "):]
        assert "context" in decision and "unfused" in decision and "WGS=16" in decision, text
        # The same decision as data: the record over the unfused heuristic.
        r = oclfuse.tuning_resolve("rms_norm", "f32", [8, 64], ctx=c)
        assert r["from_record"] and r["decision"][0] == "unfused", r
        assert r["decision"][1]["WGS"] == 16, r
        assert r["heuristic"][0] == "fused" and r["heuristic"][1], r
        x = rand(rng, (8, 64), "f32")
        y = oclfuse.rms_norm(x, ctx=c)
        assert_close(y, value(x, "f32") / np.sqrt((value(x, "f32") ** 2).mean(1, keepdims=True)
                                                  + 1e-6), "f32")
        assert c.stats()["tuning_lookups"] >= 1
    finally:
        c.close()


def test_check_errors(tmp_path):
    with pytest.raises(oclfuse.OclfError) as err:
        oclfuse.tuning_db_check(tmp_path / "missing.json")
    assert err.value.status == oclfuse.IO_ERROR and "missing.json" in err.value.message
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": 1, "records": [\n {"op": "rms')
    with pytest.raises(oclfuse.OclfError) as err:
        oclfuse.tuning_db_check(bad)
    assert err.value.status == oclfuse.DB_ERROR
    assert "bad.json:2:" in err.value.message


def test_explain_unknown_op(ctx):
    with pytest.raises(oclfuse.OclfError) as err:
        oclfuse.tuning_explain("no_such_op", "f32", [1, 2], ctx=ctx)
    assert err.value.status == oclfuse.INVALID_ARGUMENT and "no_such_op" in err.value.message


def test_damaged_database_logged(queue, tmp_path, rng):
    """A damaged context database goes to the log callback (file:line:column)
    and the call goes on with the next source."""
    bad = tmp_path / "damaged.json"
    bad.write_text('{"format": 1, "records": [\n {"op": ')
    got = []
    c = oclfuse.Context(queue, tuning_db=bad, log=lambda level, msg: got.append((level, msg)))
    try:
        x = rand(rng, (2, 16), "f32")
        y = oclfuse.rms_norm(x, ctx=c)
        assert_close(y, value(x, "f32") / np.sqrt((value(x, "f32") ** 2).mean(1, keepdims=True)
                                                  + 1e-6), "f32")
        assert any("damaged.json:2:" in msg for _, msg in got), got
        assert c.stats()["tuning_db_errors"] >= 1
    finally:
        c.close()


def test_resolve_and_params_valid(ctx):
    r = oclfuse.tuning_resolve("rms_norm", "f32", [4, 100], path="fused", ctx=ctx)
    assert not r["from_record"] and r["decision"] == r["heuristic"]
    assert r["heuristic"][0] == "fused" and "VEC" in r["heuristic"][1]
    # The heuristic's own parameters are valid; VEC = 3 is not, with the reason.
    assert oclfuse.tuning_params_valid("rms_norm", "f32", [4, 100], "fused",
                                       r["heuristic"][1], ctx=ctx) == (True, "")
    ok, why = oclfuse.tuning_params_valid("rms_norm", "f32", [4, 100], "fused", {"VEC": 3},
                                          ctx=ctx)
    assert not ok and why.startswith("oclf_tuning_params_valid: ") and "VEC" in why, why
    with pytest.raises(oclfuse.OclfError) as err:
        oclfuse.tuning_resolve("rms_norm", "f32", [4], ctx=ctx)
    assert err.value.status == oclfuse.INVALID_ARGUMENT
    assert err.value.message.startswith("oclf_tuning_resolve: ")
