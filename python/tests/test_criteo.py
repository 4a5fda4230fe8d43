"""osprey.data.Criteo (the C++ worker's Criteo TSV reader) on generated TSV files, and
examples/train_dlrm.py trained on one under `osprey launch`."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import osprey
from osprey.data import Criteo


def write_tsv(path, n, seed=0):
    """n lines: label = (first categorical id < 8), so a model can learn it; dense column 1 is the
    line number, column 2 empty, the rest small ints; categorical ids hex, the last one empty."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            c0 = int(rng.integers(0, 16))
            dense = [str(i), ""] + [str(int(v)) for v in rng.integers(-2, 50, 11)]
            cats = [format(c0, "x")] + [format(int(v), "x") for v in rng.integers(0, 1000, 24)] + [""]
            f.write("\t".join([str(int(c0 < 8))] + dense + cats) + "\n")


def test_reader_preprocesses_as_the_cpp_worker(tmp_path):
    path = tmp_path / "d.tsv"
    write_tsv(path, 10)
    lines = [line.rstrip("\n").split("\t") for line in open(path)]
    dense, keys, labels, oracle = Criteo(path).next(7)
    assert dense.shape == (7, 13) and keys.shape == (7, 26) and labels.shape == (7,) and oracle is None
    for i in range(7):
        assert labels[i] == float(lines[i][0])
        assert dense[i, 0] == pytest.approx(math.log1p(i))
        assert dense[i, 1] == 0.0  # empty
        assert dense[i, 2] == pytest.approx(math.log1p(max(int(lines[i][3]), 0)))
        assert keys[i, 0] == int(lines[i][14], 16)  # feature 0: (0 << 48) ^ id
        assert keys[i, 5] == (5 << 48) ^ int(lines[i][19], 16)
    assert Criteo(path).next(100)[0].shape[0] == 10
    reader = Criteo(path, shard=1, num_shards=3)  # lines 1, 4, 7
    d, _, _, _ = reader.next(100)
    np.testing.assert_allclose(d[:, 0], np.log1p([1, 4, 7]), rtol=1e-6)
    assert reader.next(100)[2].shape[0] == 0  # the end of the file
    wrapping = Criteo(path, shard=1, num_shards=3, wrap=True)
    wrapping.next(3)
    np.testing.assert_allclose(wrapping.next(2)[0][:, 0], np.log1p([1, 4]), rtol=1e-6)  # the next epoch


def test_malformed_line_and_missing_file_raise_naming_them(tmp_path):
    path = tmp_path / "bad.tsv"
    write_tsv(path, 3)
    with open(path, "a") as f:
        f.write("1\tx\n")
    reader = Criteo(path)
    with pytest.raises(osprey.OspreyError) as e:
        reader.next(10)
    assert f"{path}:4" in str(e.value), str(e.value)
    with pytest.raises(osprey.OspreyError) as e:
        Criteo(tmp_path / "none.tsv")
    assert "none.tsv" in str(e.value)


def test_train_dlrm_learns_a_criteo_file(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed: train_dlrm.py needs it")
    from conftest import BIN_DIR, SOURCE_DIR
    train, held_out = tmp_path / "train.tsv", tmp_path / "eval.tsv"
    write_tsv(train, 4000, seed=1)
    write_tsv(held_out, 1000, seed=2)
    report = tmp_path / "report.json"
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    sets = ["data.source=criteo", f"data.train_path={train}", f"data.eval_path={held_out}", "train.steps=60",
            "train.batch_size=128", "train.eval_samples=1000", "cluster.workers=1"]
    r = subprocess.run([os.path.join(BIN_DIR, "osprey"), "launch", "configs/python.yaml", "--quiet",
                        "--report-json", str(report), "--log-dir", str(tmp_path / "logs")] +
                       [a for s in sets for a in ("--set", s)], cwd=SOURCE_DIR, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"osprey launch failed:\n{r.stdout}\n{r.stderr}"
    rep = json.loads(report.read_text())
    log = (tmp_path / "logs" / "worker-0.log").read_text()
    assert "on 1000 samples" in log, log  # the whole eval file
    assert rep["auc"] > 0.9, f"train_dlrm.py did not learn the planted label (AUC {rep['auc']:.3f})"
