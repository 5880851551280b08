"""The `odestudy` command: run one scenario, the matrix, or the report."""

import argparse
import sys
from pathlib import Path

from .measure import environment
from .measure.modes import MODES
from .measure.scenario import BATCHINGS, DEVICES, SCALES, SCALINGS, SOLVES, Scenario, validate
from .measure.solvers import CONTROLLERS
from .study import records


def check_writable(folder: str | Path) -> None:
    """Raise ValueError (a one-line error, exit code 2) unless records can be written
    under `folder`; creates it if missing."""
    import tempfile

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write to output folder {folder}: {exc.strerror or exc}") from None


def _run(a: argparse.Namespace) -> int:
    from .measure.devices import gpu_count
    from .study.runner import execute_scenario

    if a.recommended and a.solve is not None:
        raise ValueError(
            "--recommended sets the solve (see odestudy.recommended); "
            "give either --recommended or --solve"
        )
    s = Scenario(
        device=a.device,
        n_devices=a.devices,
        mode=a.mode,
        controller=a.controller,
        scaling=a.scaling,
        scale=a.scale,
        batch=a.batch,
        spread=a.spread,
        batching=a.batching,
        solve=a.solve or "per_sample",
        processes=a.processes,
        eval_every=a.eval_every,
        lr_scaling=a.lr_scaling,
        seed=a.seed,
        trace=a.trace,
    )
    if a.recommended:
        from .measure.recommended import RECOMMENDED, recommended

        s = recommended(s)
        print("recommended: " + ", ".join(f"{k}={v}" for k, v in RECOMMENDED.items()))
    # CPU devices are virtual and made to order; GPUs must exist.
    validate(s, available_devices=gpu_count() if s.device == "gpu" else None)
    check_writable(a.out)
    record = execute_scenario(s, a.out)
    print(f"{record['status']}: {s.name()} -> {Path(a.out) / records.RECORD_NAME}")
    if record["status"] != "ok":
        print(record.get("error"), file=sys.stderr)
        return 1
    print(
        f"step time {record['step_time_s']:.4g} s (median), compile "
        f"{record['compile_time_s']:.3g} s, final loss {record['final_loss']:.4g}"
    )
    return 0


def _matrix(a: argparse.Namespace) -> int:
    from .study.matrix import parse_selection, run_matrix

    check_writable(a.results)
    recs = run_matrix(
        a.scale,
        a.device,
        force=a.force,
        results=a.results,
        study=a.study,
        selection=parse_selection(a.select),
        recommended=a.recommended,
        full=a.full,
    )
    failed = [r["name"] for r in recs if r["status"] != "ok"]
    print(
        f"{len(recs) - len(failed)} of {len(recs)} scenarios ok"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def _report(a: argparse.Namespace) -> int:
    from .report.document import settle_report
    from .study.runner import execute_report

    html = settle_report(execute_report(a.results, a.scale, a.figures))
    print(f"report: {html}")
    if a.readme:  # from the tables and figures the report notebook just wrote
        from .report.document import update_readme

        figures = Path(a.figures)
        tables = {p.stem: p for p in (figures / "tables").glob("*.md")}
        update_readme(a.readme, tables, sorted(figures.glob("*.png")), a.scale)
        print(f"updated the results section of {a.readme}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="odestudy", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run one scenario in a fresh kernel")
    r.add_argument("--device", choices=DEVICES, default="cpu")
    r.add_argument("--devices", type=int, default=1, help="devices per process")
    r.add_argument("--mode", choices=MODES, default="single")
    r.add_argument("--controller", choices=CONTROLLERS, default="pid")
    r.add_argument("--scaling", choices=SCALINGS, default="strong")
    r.add_argument("--scale", choices=tuple(SCALES), default="quick")
    r.add_argument(
        "--batch", type=int, default=None, help="global batch (strong) or per-device batch (weak)"
    )
    r.add_argument("--spread", type=float, default=0.0, help="complexity knob")
    r.add_argument("--batching", choices=BATCHINGS, default="random")
    r.add_argument(
        "--solve", choices=SOLVES, default=None, help="per_sample (default) or within_ode"
    )
    r.add_argument(
        "--processes", type=int, default=1, help="local processes joined by jax.distributed"
    )
    r.add_argument("--eval-every", type=int, default=0)
    r.add_argument("--lr-scaling", choices=("fixed", "linear"), default="fixed")
    r.add_argument("--seed", type=int, default=5678)
    r.add_argument(
        "--trace",
        action="store_true",
        help="also write a Perfetto trace of 3 untimed steps to OUT/trace",
    )
    r.add_argument(
        "--recommended",
        action="store_true",
        help="apply the recommended levers (odestudy.recommended): "
        "within-ODE batching, the fastest measured step that trains "
        "the same model",
    )
    r.add_argument("--out", required=True, help="output folder")
    r.set_defaults(func=_run)
    m = sub.add_parser("matrix", help="run every scenario of a scale, resumably")
    m.add_argument("--scale", choices=tuple(SCALES), default="quick")
    m.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto")
    m.add_argument("--force", action="store_true", help="rerun finished scenarios")
    m.add_argument(
        "--full",
        action="store_true",
        help="the whole matrix (1/2/4/8 CPU devices: rows with more devices "
        "than physical cores measure overhead); default: the matrix "
        "sized to this machine",
    )
    m.add_argument(
        "--study",
        choices=("scaling", "explain"),
        default="scaling",
        help="the scaling tables, or the studies that explain them",
    )
    m.add_argument("--results", default=str(environment.ROOT / "results"))
    m.add_argument(
        "--recommended",
        action="store_true",
        help="the scaling matrix with the recommended levers applied "
        "(records beside the default ones, named by their levers)",
    )
    m.add_argument(
        "--select",
        default="",
        help="only scenarios with these fields, e.g. scaling=strong,n_devices=2",
    )
    m.set_defaults(func=_matrix)
    rep = sub.add_parser("report", help="tables, figures and the HTML report")
    rep.add_argument("--scale", choices=tuple(SCALES), default="quick")
    rep.add_argument("--results", default=str(environment.ROOT / "results"))
    rep.add_argument("--figures", default=str(environment.ROOT / "figures"))
    rep.add_argument(
        "--readme", default=None, help="also refresh the results section of this README"
    )
    rep.set_defaults(func=_report)
    return p


def _interrupt_on_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C, so that a killed matrix shuts its kernel and any
    worker processes down instead of leaving them running."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _interrupt_on_sigterm()
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"odestudy: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
