"""examples/train_dlrm.py under `osprey launch` (worker.command, 2 workers) reaches the C++
worker's held-out AUC on the same job and data within 0.003, and the launcher's final report
comes from the script's reports."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="torch is not installed: train_dlrm.py needs it")
from conftest import BIN_DIR, SOURCE_DIR  # noqa: E402


def launch(tmp_path, config, name):
    report = tmp_path / f"{name}.json"
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # python3: this venv
    r = subprocess.run([os.path.join(BIN_DIR, "osprey"), "launch", config, "--quiet", "--report-json", str(report),
                        "--log-dir", str(tmp_path / name)], cwd=SOURCE_DIR, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"osprey launch {config} failed:\n{r.stdout}\n{r.stderr}"
    return json.loads(report.read_text())


def test_train_dlrm_matches_cpp_worker_auc(tmp_path):
    py = launch(tmp_path, "configs/python.yaml", "python")
    cpp = launch(tmp_path, "configs/local.yaml", "cpp")
    assert py["auc"] > 0.7, py
    assert abs(py["auc"] - cpp["auc"]) <= 0.003, f"python AUC {py['auc']:.4f} vs C++ {cpp['auc']:.4f}"
    assert py["steps"] == cpp["steps"]
