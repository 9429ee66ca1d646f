"""The benchmark scripts run on the CPU (the GPU check with ``--quick``) and write their JSON."""

from __future__ import annotations

import json

from benchmarks import bench_realdata, gpu_check


def test_gpu_check_runs_on_cpu_quick(tmp_path, capsys):
    out = tmp_path / "gpu_check.json"
    assert (
        gpu_check.main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    )  # targets not enforced on CPU
    data = json.loads(out.read_text())
    for key in (
        "resnet18_views_per_s",
        "loss_share_pct",
        "weince_overhead_pct",
        "augment_share_pct",
        "met",
        "steps",
    ):
        assert key in data
    assert data["weince_parameters"] == 0
    assert {"smallcnn/HSCL/fp32", "smallcnn/InfoNCE/fp32", "smallcnn/WeiNCE/fp32"} <= set(data["steps"])
    assert "targets met" in capsys.readouterr().out


def test_bench_realdata_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    args = [
        "--arch",
        "smallcnn",
        "--batch",
        "8",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--target",
        "1e9",
        "--out",
        str(out),
    ]
    assert bench_realdata.main(args) == 0
    data = json.loads(out.read_text())
    assert data["weince_parameters"] == 0 and "hscl_loss_share_pct" in data and "augment_share_pct" in data
