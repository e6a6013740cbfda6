"""``dcpsim validate`` end to end on 4 gloo processes (small): profile, calibrate, plan, simulate, run, compare."""

import builtins
import json
import math

import pytest

from dcpsim.experiments.cli import main

SMALL = ["--backend", "gloo", "--nproc", "4", "--iterations", "1", "--tokens", "1536", "--context-len", "512",
         "--median-len", "120"]


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    pytest.importorskip("torch")
    import io
    from contextlib import redirect_stdout

    out = tmp_path_factory.mktemp("validate")
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["validate", *SMALL, "--policies", "static-cp,mcore-dcp,hydra,no-such-policy", "--out", str(out)])
    return rc, buf.getvalue(), out


def test_prints_per_microbatch_errors_and_ranking(validated):
    rc, text, _ = validated
    assert rc == 0, text
    assert "per-microbatch prediction error" in text
    assert "rank-mb MAPE" in text and "iter MAPE" in text
    ranking = [ln for ln in text.splitlines() if ln.startswith("ranking by iteration time")]
    verdict = json.loads((validated[2] / "validate.json").read_text())["ranking"]["verdict"]
    assert len(ranking) == 1 and ranking[0].endswith(": " + (verdict.upper() if verdict == "different" else verdict))
    assert "real spread" in text and "run-to-run spread" in text and "(rule:" in text
    for policy in ("static-cp", "mcore-dcp", "hydra"):
        assert policy in text


def test_writes_profile_calibration_errors_and_plot(validated):
    _, _, out = validated
    for name in ("profile.csv", "calibration.json", "simulated.csv", "errors.csv", "validate.png",
                 "run/timeline.csv", "run/losses.csv"):
        assert (out / name).exists(), name
    from dcpsim.cost_models import Calibration
    from dcpsim.cost_models.profile_table import read_profile

    prof = read_profile(out / "profile.csv")
    assert {"attn_fwd", "attn_bwd", "gemm", "layer_fwd", "layer_bwd", "send_recv", "all_to_all"} <= set(prof.op)
    cal = Calibration.load(out / "calibration.json")
    assert cal.name == "validate-cpu"
    # the written calibration is the fit of the written profile: refitting profile.csv gives it back
    from dcpsim.experiments.validation.pipeline import calibrate
    from dcpsim.experiments.validation.settings import ValidateSettings

    refit, _ = calibrate(prof, ValidateSettings(gpu="h200", device="cpu"), "float32")
    for term in ("attn_fwd", "attn_bwd", "gemm", "layer_overhead_fwd_s", "layer_overhead_bwd_s"):
        assert getattr(refit, term) == getattr(cal, term), term
    import pandas as pd

    err = pd.read_csv(out / "errors.csv")
    assert set(err.columns) >= {"policy", "iteration", "round", "microbatch", "predicted_s", "measured_s", "ape"}
    assert set(err["round"]) == {0, 1}  # --repeats 2 (the default): two rounds over the policies
    assert "compute timed concurrently on 4 processes" in prof.source.iloc[0]
    assert (err.measured_s > 0).all() and (err.predicted_s > 0).all()


def test_json_document_and_unknown_policy_skipped(validated):
    _, text, out = validated
    doc = json.loads((out / "validate.json").read_text())
    assert doc["skipped"] == ["no-such-policy"] and "skipped no-such-policy" in text
    assert sorted(doc["policies"]) == ["hydra", "mcore-dcp", "static-cp"]
    overhead = doc["fit"]["layer_overhead_fwd_s"]
    from dcpsim.cost_models import Calibration

    assert overhead["how"] == "fitted"
    assert overhead["seconds"] == Calibration.load(out / "calibration.json").layer_overhead_fwd_s
    line = next(ln for ln in text.splitlines() if ln.startswith("calibration validate-cpu"))
    assert "layer_overhead_fwd_s" in line and " us fitted" in line
    for s in doc["policies"].values():
        assert s["microbatches"] >= 1 and s["measured_iteration_s"] > 0 and s["predicted_iteration_s"] > 0
        assert 0 <= s["iteration_mape"] and 0 <= s["microbatch_mape"] and 0 <= s["rank_microbatch_mape"]
    assert sorted(doc["ranking"]["simulated"]) == sorted(doc["ranking"]["measured"]) == sorted(doc["policies"])
    rk = doc["ranking"]
    assert rk["same"] == (rk["disagree"] == 0)  # same_ranking and the verdict's pairs agree on disagreement
    assert rk["verdict"] in ("same", "same within noise", "different")
    assert rk["agree"] + rk["disagree"] == len(rk["pairs"]) <= 3
    # two rounds (--repeats 2) measure a spread for every policy; each pair is judged against it
    assert all(math.isfinite(s) for s in rk["spread"].values()) and sorted(rk["spread"]) == sorted(doc["policies"])
    meas = {k: s["measured_iteration_s"] for k, s in doc["policies"].items()}
    pred = {k: s["predicted_iteration_s"] for k, s in doc["policies"].items()}
    for a, b, diff, noise, agrees, resolved in rk["pairs"]:
        assert diff == pytest.approx(abs(meas[a] - meas[b]) / max(meas[a], meas[b]), rel=1e-12)
        assert noise == max(rk["spread"][a], rk["spread"][b]) and resolved == (diff > noise)
        assert agrees == ((pred[a] < pred[b]) == (meas[a] < meas[b]))
    unresolved = sum(1 for p in rk["pairs"] if not p[5])
    assert (rk["verdict"] == "same") == (rk["disagree"] == 0 and unresolved == 0)
    assert (rk["verdict"] == "different") == (rk["disagree_resolved"] > 0)
    assert len(doc["microbatches"]) == sum(s["microbatches"] for s in doc["policies"].values())


def test_no_layer_overhead_reuses_the_profile_and_zeroes_the_term(validated, tmp_path, capsys):
    _, _, out = validated
    args = [*SMALL, "--policies", "static-cp", "--profile", str(out / "profile.csv"), "--no-layer-overhead",
            "--repeats", "1", "--out", str(tmp_path), "--json"]
    assert main(["validate", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranking"]["spread"]["static-cp"] is None  # one round: no noise estimate (JSON null, not NaN)
    assert doc["ranking"]["verdict"] == "same" and doc["ranking"]["pairs"] == []
    assert doc["calibration"] == "validate-cpu-no-layer-overhead"
    assert doc["fit"]["layer_overhead_fwd_s"]["seconds"] == 0 == doc["fit"]["layer_overhead_bwd_s"]["seconds"]


def test_the_pipeline_called_directly_returns_what_it_writes(validated, tmp_path):
    """run_validation is the whole command without its printing: its document is validate.json, its progress
    lines go to ``say``, and the report text is made from the document alone."""
    from dcpsim.experiments.validation.pipeline import document_json, run_validation
    from dcpsim.experiments.validation.report import report_text
    from dcpsim.experiments.validation.settings import ValidateSettings

    _, _, out = validated
    said: list[str] = []
    settings = ValidateSettings(backend="gloo", nproc=4, iterations=1, tokens=1536, context_len=512,
                                median_len=120, policies="static-cp,no-such-policy",
                                profile=str(out / "profile.csv"), repeats=1, out=str(tmp_path / "direct"))
    doc = run_validation(settings, say=said.append)
    assert (tmp_path / "direct" / "validate.json").read_text() == document_json(doc) + "\n"
    assert said == ["note: policy 'no-such-policy' is not registered; skipped",
                    "running 1 policies x 1 iteration(s) x 1 round(s) for real ..."]
    assert doc["settings"]["context_len"] == 512 and doc["skipped"] == ["no-such-policy"]
    assert sorted(doc["policies"]) == ["static-cp"]
    assert doc["plot"] == str(tmp_path / "direct" / "validate.png")
    text = report_text(doc)
    assert text.splitlines()[0].startswith("per-microbatch prediction error")
    assert "skipped no-such-policy: not registered" in text and text.splitlines()[-1].startswith("wrote ")


def exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse rejected a flag's value
        return int(e.code)


def test_clear_errors_before_torch(capsys, monkeypatch, tmp_path):
    """Bad arguments are reported as such with or without torch: they are checked first (no torch needed)."""
    assert main(["validate", "--policies", "nope", "--out", str(tmp_path)]) == 2
    assert "none of the policies ['nope'] is registered" in capsys.readouterr().err
    assert exit_code(["validate", "--repeats", "0", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "argument --repeats: '0' is invalid: expected an integer ≥ 1" in err and err.count("\n") == 1
    assert main(["validate", "--model", "no-such-model", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and err.count("\n") == 1
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert main(["validate"]) == 2
    err = capsys.readouterr().err
    assert "needs torch" in err and len(err.strip().splitlines()) == 1


def test_collective_probes_span_sizes_a_loaded_host_resolves():
    """4 KiB to 16 MiB, 6 sizes (full profile 8): the largest take well over a loaded host's per-call wait
    (docs/real_runtime.md, "On a loaded small machine")."""
    pytest.importorskip("torch")  # ProfileSettings lives in real_runtime.profiler
    from dcpsim.experiments.validation.pipeline import profile_settings
    from dcpsim.experiments.validation.settings import ValidateSettings

    quick = profile_settings(ValidateSettings(), 256).collective_bytes
    full = profile_settings(ValidateSettings(full_profile=True), 256).collective_bytes
    assert (quick[0], quick[-1], len(quick)) == (1 << 12, 1 << 24, 6)
    assert (full[0], full[-1], len(full)) == (1 << 12, 1 << 24, 8)
