"""The GPU table (`figures/tables/gpu.md`): the rows predicted from one GPU
(`odestudy predict --device gpu ... --out`, under `<machine>/predictions/`) beside the
measured 1-GPU rows of the current protocol, or alone where there are none; marked
as predicted, each with its interval, profile, record, machine and time. Synthetic
records; nothing here compiles a step."""

import json

from odestudy.measure.modes import MODES
from odestudy.measure.recommended import recommended
from odestudy.measure.scenario import Scenario
from odestudy.report.document import write_report
from odestudy.report.gpu import PREDICTIONS_FOLDER, gpu_predictions, predicted_section
from odestudy.report.tables import render_blocks
from odestudy.study.rec import Rec

from .helpers import record

MACHINE = "xeon-16cpu-some-gpu-abc123"
MULTI = [name for name, m in MODES.items() if m.multi_device]


def _prediction(n: int, step: float = 0.04, best: bool = False) -> dict:
    """A prediction of `n` GPUs as `odestudy predict --out` writes it (the fields the
    table reads), from a 1-GPU sweep on `MACHINE`."""
    one = Scenario(device="gpu", scale="quick")
    one = recommended(one) if best else one
    target = Scenario.from_dict({**one.to_dict(), "mode": "shard_map", "devices_per_process": n})
    rows = [
        {
            "mode": mode,
            "step_time_s": step / (1 + 0.1 * n),
            "step_time_interval_s": [step / (1.2 + 0.1 * n), step / (0.9 + 0.1 * n)],
            "speedup": 1 + 0.1 * n,
            "speedup_interval": [0.9 + 0.1 * n, 1.2 + 0.1 * n],
        }
        for mode in MULTI
    ]
    sweep = {
        "scenario": one.to_dict(),
        "machine_id": MACHINE,
        "device_kind": "Some GPU",
        "versions": {"jax": "0.0.1"},
        "git_commit": "0123456789abcdef",
        "protocol": 2,
        "rows": [{"batch": b, "step_times_s": [step] * 10} for b in (32 // n, 32)],
        "probe": {"finished": "2026-11-26T03:19:40+00:00"},
    }
    return {
        "scenario": target.to_dict(),
        "n_devices": n,
        "profile": {"name": "h100-nvlink", "device": "gpu", "description": "NVLink H100s"},
        "one_device_step_s": step,
        "trained": True,
        "trained_loss": 0.02,
        "final_loss": 0.004,
        "trained_from": None,
        "rows": rows,
        "sweep": sweep,
    }


def _write(results, name: str, rec: dict) -> None:
    folder = results / MACHINE / PREDICTIONS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(rec))


def test_predicted_rows_are_marked_with_interval_profile_record_machine_and_time(tmp_path):
    for n in (2, 4, 8):
        _write(tmp_path, f"gpu-pid-quick-{n}-h100-nvlink", _prediction(n))
    _write(tmp_path, "gpu-pid-quick-2-h100-nvlink-recommended", _prediction(2, 0.006, True))
    found = gpu_predictions(tmp_path, "quick")
    assert [p["n_devices"] for p in found] == [2, 4, 8, 2]  # the default step first
    assert gpu_predictions(tmp_path, "seed") == []
    # The recommended step's 1-GPU row, measured on the machine of its sweep.
    one = record(recommended(Scenario(device="gpu", scale="quick")), step=0.0061, machine=MACHINE)
    text = render_blocks(predicted_section(found, [Rec(one)]))
    lines = text.splitlines()
    assert lines[0] == "**Predicted rows (not measured on several GPUs).**"
    rows = [line for line in lines if "(predicted)" in line]
    assert len(rows) == 4 * len(MULTI)
    assert {r.split("|")[1].strip() for r in rows} == {"2 (predicted)", "4 (predicted)",
                                                       "8 (predicted)"}  # fmt: skip
    assert {r.split("|")[2].strip() for r in rows} == set(MULTI)
    two = next(r for r in rows if "| 2 (predicted) | pmap" in r and "| default" in r)
    assert "| 40.0 " in two and "33.3 [28.6, 36.4]" in two and "1.20 [1.10, 1.40]" in two
    assert "h100-nvlink" in two and "gpu-pid-quick-2-h100-nvlink " in two
    best = next(r for r in rows if "| recommended" in r)
    assert "| 6.00 " in best and "| 6.10 " in best  # its sweep's 1-GPU step, the row's
    sources = [line for line in lines if line.startswith("- ")]
    assert len(sources) == 4
    assert all(MACHINE in s and "2026-11-26 03:19:40 UTC" in s for s in sources)
    assert "model trained anew" in sources[0] and "no measured 1-GPU row" in sources[0]
    assert one["name"] in sources[-1] and "profile h100-nvlink: NVLink H100s" in sources[-1]
    assert predicted_section([], [Rec(one)]) == []


def test_the_gpu_table_shows_predictions_without_a_measured_gpu_row(tmp_path):
    results = tmp_path / "results"
    for n in (2, 4, 8):
        _write(results, f"gpu-pid-quick-{n}-h100-nvlink", _prediction(n))
    out = write_report(results, "quick", tmp_path / "figures", draw=False)
    table = out["tables"]["gpu"].read_text()
    assert table.splitlines()[2].startswith("No GPU row of the current protocol")
    assert "**Predicted rows (not measured on several GPUs).**" in table
    assert all(f"| {n} (predicted)" in table for n in (2, 4, 8))
