"""Every public function and class of :mod:`lipattn.book` refuses bad input by name.

A sweep: each public callable (its module's ``__all__``; the Sphinx extension is
left out, it is called by Sphinx) is called once per argument and bad value --
NaN, inf, bool, complex, str, None, wrong shapes, empty sequences, negative,
zero and huge counts -- with the other arguments at cheap good values, and the
explorers' ``render`` with values no slider takes. An outcome passes if it is a
``ValueError``/``TypeError``/``OverflowError`` whose message names the argument,
or, for a value that may be legitimate (a negative real, zero, a huge count), a
finite result within the time limit. It fails as

- ``nan``: returned a NaN or inf;
- ``accepted``: returned for a value that is never valid (a wrong result);
- ``hang``: ran past the per-call limit;
- ``unclear``: raised, but not a clear error naming the argument.

The sweep runs in a forked child with a memory limit, so a regression that
hangs in C code or allocates without bound fails the test instead of the machine.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import shutil
import signal
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["audit", "quiz", "interview", "plotting", "pretrained", "widgets", "explorers",
           "viz.collapse", "viz.collapse_explorers", "viz.lipschitz", "viz.logits",
           "viz.prenorm", "viz.real", "viz.scaling", "viz.scaling_explorers", "viz.sensitivity",
           "viz.softmax", "viz.spectral", "viz.spectral_normalisation", "lm", "viz.lm", "bytelm",
           "corpus", "stability", "lmprobe", "viz.lmprobe"]
PER_CALL_S = 4.0

NAN, INF = float("nan"), float("inf")
# value -> whether it may be legitimate ("maybe": pass on a finite result)
ALWAYS, MAYBE = "always", "maybe"


class _Timeout(BaseException):
    pass


def bad_values(kind: str) -> list[tuple[str, Any, str]]:
    """(label, value, ALWAYS|MAYBE) for one kind of argument."""
    common = [("None", None, ALWAYS), ("str", "x", ALWAYS), ("complex", 1j, ALWAYS)]
    if kind == "count":
        return common + [("nan", NAN, ALWAYS), ("inf", INF, ALWAYS), ("bool", True, ALWAYS),
                         ("float", 2.5, ALWAYS), ("-1", -1, ALWAYS), ("0", 0, MAYBE),
                         ("huge", 10**12, MAYBE)]
    if kind == "seed":
        return common + [("nan", NAN, ALWAYS), ("bool", True, ALWAYS), ("float", 2.5, ALWAYS),
                         ("-1", -1, ALWAYS)]
    if kind in ("float", "pos"):
        return common + [("nan", NAN, ALWAYS), ("inf", INF, ALWAYS), ("-inf", -INF, ALWAYS),
                         ("bool", True, ALWAYS), ("-1", -1.0, MAYBE if kind == "float" else ALWAYS),
                         ("0", 0.0, MAYBE), ("1e300", 1e300, MAYBE), ("1e-300", 1e-300, MAYBE)]
    if kind == "bool":
        return [("None", None, ALWAYS), ("str", "yes", ALWAYS), ("int", 1, ALWAYS),
                ("nan", NAN, ALWAYS), ("array", np.array([True, False]), ALWAYS)]
    if kind == "text":
        return [("None", None, ALWAYS), ("int", 1, ALWAYS), ("bool", True, ALWAYS),
                ("bytes", b"x", ALWAYS), ("float", NAN, ALWAYS), ("empty", "", MAYBE)]
    if kind == "choice":
        return [("None", None, ALWAYS), ("int", 1, ALWAYS), ("bool", True, ALWAYS),
                ("bytes", b"x", ALWAYS), ("unknown", "no-such-choice", ALWAYS)]
    if kind == "array":
        return common + [("nan", np.full((3, 3), NAN), ALWAYS),
                         ("inf", np.full((3, 3), INF), ALWAYS),
                         ("bool", np.ones((3, 3), bool), ALWAYS),
                         ("complex", np.ones((3, 3), complex), ALWAYS),
                         ("empty", np.zeros((0,)), ALWAYS), ("scalar", 1.0, ALWAYS),
                         ("3d", np.ones((2, 2, 2, 2)), ALWAYS)]
    if kind in ("counts", "floats"):
        out = common + [("empty", (), ALWAYS), ("nan", (NAN,), ALWAYS), ("inf", (INF,), ALWAYS),
                        ("bool", (True,), ALWAYS), ("strs", ("a",), ALWAYS),
                        ("nested", ((1, 2),), ALWAYS)]
        if kind == "counts":
            out += [("-1", (-1,), ALWAYS), ("float", (2.5,), ALWAYS), ("huge", (10**12,), MAYBE)]
        else:
            out += [("1e300", (1e300,), MAYBE)]
        return out
    if kind in ("path", "outdir"):  # a directory to read ("path") or to write ("outdir")
        out = [("int", 1, ALWAYS), ("bool", True, ALWAYS), ("float", 1.5, ALWAYS),
               ("empty", {}, ALWAYS)]
        return out + ([("missing", "/no/such/dir", ALWAYS)] if kind == "path" else [])
    if kind == "obj":  # results of another function, models, figures: the wrong type
        return [("None", None, ALWAYS), ("str", "x", ALWAYS), ("float", 1.5, ALWAYS),
                ("empty", {}, ALWAYS)]
    raise AssertionError(kind)


def kind_of(name: str, annotation: Any, default: Any) -> str:
    ann = str(annotation)
    if name == "seed" or name.endswith("_seed"):
        return "seed"
    if ann in ("int", "int | None") or (ann == "_empty" and type(default) is int):
        return "count"
    if ann in ("float", "float | None") or (ann == "_empty" and type(default) is float):
        return "float"
    if ann == "bool" or (ann == "_empty" and type(default) is bool):
        return "bool"
    if ann in ("str", "str | None"):
        return "text"
    if "ndarray" in ann and "dict" not in ann:
        return "array"
    if ann.startswith("tuple[int"):
        return "counts"
    if ann.startswith("tuple[float"):
        return "floats"
    return "obj"


def _cheap() -> dict[str, dict[str, Any]]:
    """Good, cheap arguments per callable ("module.name"), built lazily."""
    from lipattn.book import audit, bytelm, lm, pretrained, quiz, stability
    from lipattn.book.viz import (
        collapse,
        lipschitz,
        real,
        scaling,
        softmax,
        spectral,
        spectral_normalisation,
    )
    from lipattn.models import load

    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((4, 3)), rng.standard_normal((3, 3))
    opt = quiz.Option("a", True, "b")
    part = audit.Part("s", "true", "z")
    model = real.random_model("gpt2", 1, 8, 2)
    trained = pretrained.load()["pre"]
    top = np.array([[5.0, 6.0], [2e3, 50.0]])                      # a synthetic logit sweep
    arm = {"max_logit": top[:, :, None, None] * np.ones((1, 1, 2, 3)),
           "final_loss": np.array([[0.01, 0.02], [2.7, 0.05]]),
           "lipschitz": np.stack([np.ones((2, 2, 1)), top[:, :, None]], axis=2)}
    sweep = {"lrs": np.array([1e-2, 1e-1]), "seeds": np.array([0, 1]), False: arm, True: arm}
    depths, per_seed = np.array([2.0, 4.0, 8.0]), np.ones((3, 4)) * np.array([[1.0], [2], [3]])
    ts = (0.5, 1.0)
    ck = lm.checkpoint_dir()
    byte_model = load(ck)
    text = (ck / "heldout.txt").read_bytes()
    win = lm.window_tokens(text, 8, 2)
    shipped = lm.read_measurements(lm.checkpoint_dir(weights=False), check=False)
    meas, traj = shipped["measure"], shipped["trajectory"]
    tiny_lm = bytelm.build(1, 8, 2, 8)[1]
    curve = {"heldout_curve": [[0, 8.0], [10, 3.0], [20, 2.9]], "train_bits": [5.0, 3.0],
             "unigram_bits": 4.5}
    qk_model = stability.build(True, 1, 8, 2)[0]
    sweep_runs = [{"qk_norm": qk, "arm": arm, "mitigations": [], "lr": lr, "seed": s,
                   "eval_steps": [0, 10], "heldout_bits": [8.0, 3.0 + lr],
                   "max_logit": [[1.0], [4.0]], "gain_bound": [[2.0], [6.0]] if qk else [],
                   "diverged_at": None, "const": {"0": [1.0], "10": [2.0]}}
                  for lr in (1e-2, 1e-1) for s in (0, 1) for qk in (False, True)
                  for arm in ("none", "all")]
    stab = {"args": {}, "git_commit": "x", "runs": sweep_runs, "cells": [],
            "unigram_bits": 4.5}
    # update_measurements writes: a copy, in one fixed place (the sweep runs in a child)
    ck_copy = Path(tempfile.gettempdir()) / "lipattn-lmprobe-sweep" / "m"
    shutil.rmtree(ck_copy, ignore_errors=True)
    shutil.copytree(ck, ck_copy)
    return {
        "stability.build": dict(qk_norm=True, n_layer=1, d=8, n_head=2),
        "stability.gain_bound": dict(model=qk_model),
        "stability.max_logits": dict(model=qk_model, windows=np.zeros((2, 4), int)),
        "stability.train_run": dict(qk_norm=True, lr=1e-2, seed=0, mitigations=True, steps=2,
                                    n_layer=1, d=8, n_head=2, context=8, batch=2,
                                    eval_every=1, eval_windows=2, corpus=(text, text)),
        "stability.summarise": dict(runs=sweep_runs, unigram_bits=4.5),
        "stability.failures": dict(runs=sweep_runs, unigram_bits=4.5),
        "stability.late_slope": dict(run=sweep_runs[0], frac=1.0),
        "stability.mitigation_set": dict(mitigations=("zloss",)),
        "stability.arm_name": dict(mitigations=("zloss",)),
        "stability.summary": dict(result=stab),
        "stability.read_results": dict(),
        "viz.lm.fig_stability_lr": dict(result=stab),
        "viz.lm.fig_stability_training": dict(result=stab, lr=0.1),
        "lmprobe.attention_growth": dict(model=byte_model, windows=win[:1, :4], lengths=(2, 4),
                                         tol=1e-3),
        "lmprobe.growth_summary": dict(growth=shipped["growth"]),
        "lmprobe.random_init": dict(model=byte_model),
        "lmprobe.byte_interventions": dict(model=byte_model, windows=win[:1, :4], n_pos=1,
                                           draws=1, tol=1e-3),
        "lmprobe.intervention_summary": dict(res=shipped["interventions"]),
        "viz.lmprobe.fig_growth": dict(growth=shipped["growth"],
                                       random=shipped["growth_random"]),
        "viz.lmprobe.fig_interventions": dict(res=shipped["interventions"]),
        "lmprobe.update_measurements": dict(path=ck_copy, parts="growth", growth_windows=1,
                                            random_seeds=1),
        "lm.weights_sha256": dict(path=ck),
        "lm.window_tokens": dict(text=text, N=8, count=2),
        "lm.attention_stats": dict(model=byte_model, tokens=win[0]),
        "lm.window_constants": dict(model=byte_model, tokens=win[0, :4], tol=1e-3,
                                    prefixes=(1, 4)),
        "lm.measure": dict(model=byte_model, windows=win[:1, :4], tol=1e-3),
        "lm.run_steps": dict(run_dir=ck),
        "lm.trajectory": dict(checkpoints=[(0, byte_model)], windows=win[:1, :4], tol=1e-3),
        "lm.cached_trajectory": dict(checkpoints=[(0, ck)], windows=win[:1, :4], tol=1e-3),
        "lm.precompute": dict(path=ck, windows=1, trajectory_windows=1, N=4, tol=1e-3),
        "lm.read_measurements": dict(path=lm.checkpoint_dir(weights=False)),
        "lm.constants_summary": dict(meas=meas), "lm.direction_summary": dict(meas=meas),
        "lm.uniform_first_mass": dict(N=8),
        "lm.scale_alignment": dict(model=byte_model, meas={k: v[:2] for k, v in meas.items()}),
        "lm.trajectory_summary": dict(traj=traj), "lm.n_parameters": dict(model=byte_model),
        "lm.loss_summary": dict(train=curve, flat_tol=0.02),
        "viz.lm.fig_loss": dict(train=curve),
        "lm.recipe": dict(args={"decay": "cosine", "min_lr": "0.0003", "clip": "1.0"}),
        "viz.lm.byte_label": dict(b=97), "viz.lm.fig_constants": dict(meas=meas),
        "viz.lm.fig_trajectory": dict(traj=traj),
        "bytelm.build": dict(n_layer=1, d=8, n_head=2, context=8),
        "bytelm.heldout_windows": dict(text=text, context=8, count=2),
        "bytelm.heldout_bits": dict(lm=tiny_lm, windows=win, batch=1),
        "corpus.unigram_entropy": dict(data=b"abca"),
        "viz.logits.summary": dict(sweep=sweep),
        "viz.prenorm.fig_last_layer": dict(depths=depths,
                                           grads={"post": per_seed, "pre": per_seed}, d=4),
        "viz.prenorm.fig_amplification": dict(
            depths=depths, amp={k: {"post": per_seed, "pre": per_seed} for k in ("random", "sign")},
            sizes={"random": 1e-3, "sign": 1e-5}),
        "viz.real.fig_variants": dict(ts=ts, curves={
            f: real.scale_curves(f, ts, d=2, N=3) for f in ("random", "two-sided")}),
        "viz.scaling.fig_nonmonotone": dict(
            curves={2: (np.full(13, 0.3), np.full(13, 0.01))},
            profile=scaling.fixed_sigma_profile(3, np.array([0.5, 1.0]), samples=10), n_keys=3),
        "quiz.Quiz.from_yaml": dict(path=ROOT / "chapters" / "quizzes" / "01_softmax_jacobian.yml"),
        "quiz.Quiz.combine": dict(quizzes=[quiz.Quiz.from_yaml(
            ROOT / "chapters" / "quizzes" / "01_softmax_jacobian.yml")]),
        "quiz.Quiz": dict(questions=[quiz.Question("p", (opt, quiz.Option("c", False, "d")))]),
        "pretrained.measure": dict(models=pretrained.load(), tokens=pretrained.eval_tokens(2),
                                   scales=(2.0,)),
        "pretrained.eval_tokens": dict(batch=2),
        "viz.logits.attention_constants": dict(model=trained, tokens=pretrained.eval_tokens(1),
                                               qk_norm=False, tol=1e-3),
        "viz.logits.head_bounds": dict(model=trained, tokens=pretrained.eval_tokens(1), tol=1e-3),
        "viz.logits.logit_sweep": dict(lrs=(1e-2,), seeds=(0,), steps=2),
        "viz.real.branch_constants": dict(model=model, H=model.embed(np.arange(3)), tol=1e-3),
        "viz.real.head_constants": dict(attn=model.blocks[0].attn, X=model.embed(np.arange(3)),
                                        tol=1e-3),
        "viz.prenorm.profiles": dict(layers=2, d=8, seeds=2),
        "viz.prenorm.grid_index": dict(lr=1e-2, warmup=0, seed=0),
        "viz.prenorm.fig_profile": dict(layers=2),
        "viz.scaling.fig_gradients": dict(grads=scaling.gradient_curves(n_keys=3, ds=(2, 4),
                                                                        samples=10)),
        "viz.sensitivity.depth_scan": dict(d=4, seeds=1),
        "audit.Part": dict(says="s", verdict="true", size="z"),
        "audit.Claim": dict(number=1, topic="t", parts=(part,), correct="c", short="s",
                            chapter="01_softmax_jacobian", refs=(), trap={"en": "e", "zh": "z"}),
        "audit.claim": dict(number=1), "audit.claim_box": dict(number=1),
        "audit.section_label": dict(number=1),
        "audit.interview_answer": dict(chapter="01_softmax_jacobian"),
        "quiz.Option": dict(text="a", correct=True, why="b"),
        "quiz.Question": dict(prompt="p", options=(opt, quiz.Option("c", False, "d"))),
        "interview.en_hash": dict(text="abc"),
        "interview.load": dict(chapter="01_softmax_jacobian"),
        "interview.stale_fields": dict(chapter="01_softmax_jacobian"),
        "interview.stale_texts": dict(data={"q": {"en": "a", "zh": "甲", "zh_from": "x"}},
                                      name="q.yml"),
        "quiz.stale_fields": dict(path=ROOT / "chapters" / "quizzes" / "01_softmax_jacobian.yml"),
        "quiz.Quiz.glue_yaml": dict(key="quiz",
                                    path=ROOT / "chapters" / "quizzes" / "01_softmax_jacobian.yml"),
        "interview.answer": dict(chapter="01_softmax_jacobian"),
        "interview.question": dict(chapter="01_softmax_jacobian"),
        "plotting.figure": dict(),
        "plotting.phone_min_width": dict(css_width=600.0, min_font_px=10.0),
        "widgets.Slider": dict(name="s", values=(1, 2)),
        "explorers.get_explorer": dict(name="softmax-logits"),
        "viz.collapse.tokens": dict(n=4, d=3),
        "viz.collapse.mlp_weights": dict(d=3, lip=2.0, layers=2),
        "viz.collapse.fig_intro": dict(n=4, layers=2),
        "viz.collapse.leading_coefficient_table": dict(n=3, d=2),
        "viz.collapse.signature_run": dict(n=3, d=2, layers=2, dps=30),
        "viz.collapse.skip_curves": dict(n=3, d=4, layers=2, seeds=1),
        "viz.collapse.fig_skips": dict(curves=collapse.skip_curves(n=3, d=4, layers=2, seeds=1)),
        "viz.collapse.mlp_curves": dict(lips=(0.5, 4.0), n=3, d=4, layers=2, seeds=1),
        "viz.collapse.regime_grid": dict(scales=np.array([0.5, 1.0]), layers=2, n=3, d=4,
                                         seeds=1),
        "viz.collapse.fig_regime": dict(grid=collapse.regime_grid(
            scales=np.array([0.5, 1.0]), layers=2, n=3, d=4, seeds=1)),
        "viz.collapse.gradient_table": dict(n=3, d=3),
        "viz.collapse.init_sharpness": dict(ds=(4, 8), n=3, seeds=1),
        "viz.collapse_explorers.skip_data": dict(seeds=1),
        "viz.lipschitz.tokens": dict(config="sink", t=1.0, N=4),
        "viz.lipschitz.castin_code_bound": dict(X=X, W_Q=W, W_K=W, W_V=W),
        "viz.lipschitz.two_sided_constant_mp": dict(t=1.0, dps=30),
        "viz.lipschitz.growth_curves": dict(config=lipschitz.CONFIGS[0], N=4,
                                            ts=np.array([0.5, 1.0])),
        "viz.lipschitz.sink_table": dict(radii=np.array([0.5, 1.0]), Ns=(2, 4)),
        "viz.lipschitz.fig_sqrt_n": dict(table=lipschitz.sink_table(np.array([0.5, 1.0]), (2, 4)),
                                         Ns=(2, 4)),
        "viz.lipschitz.looseness_sample": dict(samples=3),
        "viz.lipschitz.cost_table": dict(sizes=((4, 3),), dense_max_side=50),
        "viz.real.random_model": dict(layout="gpt2", L=2, d=8, n_head=2),
        "viz.real.depth_profile": dict(layout="gpt2", L=2, depths=(1, 2), d=8, n_head=2, N=3),
        "viz.real.variant_layer": dict(name=real.VARIANTS[0], W_Q=W, W_K=W, W_V=W),
        "viz.real.variant_constant": dict(name=real.VARIANTS[0], X=X, W_Q=W, W_K=W, W_V=W),
        "viz.real.scale_curves": dict(family="random", ts=(0.5, 1.0), d=2, N=3),
        "viz.scaling.fig_mechanism": dict(sigmas=(1.0, 3.0)),
        "viz.scaling.mean_inverse_chi": dict(d=4),
        "viz.scaling.nested_logits": dict(d=4, n_keys=3, scaled=True, queries=5),
        "viz.scaling.fig_intuition": dict(ds=(4, 8, 16), n_keys=3),
        "viz.scaling.saturation_curves": dict(n_keys=3, ds=(2, 4), samples=10),
        "viz.scaling.two_token_sigma_table": dict(sigmas=np.array([0.5, 1.0])),
        "viz.scaling.fig_two_token_sigma": dict(
            table=scaling.two_token_sigma_table(np.array([0.5, 1.0])), mc_sigmas=(1.0,),
            samples=10),
        "viz.scaling.jac_norm_samples": dict(d=4, n_keys=3, scaled=True, queries=5),
        "viz.scaling.fig_jac_distribution": dict(n_keys=3, ds=(4, 8, 16), queries=5),
        "viz.scaling.fixed_sigma_profile": dict(n_keys=3, sigmas=np.array([0.5, 1.0]),
                                                samples=10),
        "viz.scaling.gradient_curves": dict(n_keys=3, ds=(2, 4), samples=10),
        "viz.scaling.logit_step_gain": dict(d=4, n_keys=3, scaled=True, samples=5),
        "viz.scaling.fig_rem": dict(n_keys_list=(4, 8), samples=5),
        "viz.scaling_explorers.d_explorer_data": dict(n_keys=3, scaled=True),
        "viz.scaling_explorers.sigma_rows": dict(),
        "viz.softmax.norm_search": dict(n=3, trials=20, steps=3),
        "viz.softmax.fig_norm_search": dict(result=softmax.norm_search(n=3, trials=20, steps=3)),
        "viz.softmax.simplex_grid": dict(resolution=10),
        "viz.softmax.fig_simplex": dict(resolution=10),
        "viz.softmax.lipschitz_ratios": dict(ns=(2, 4), pairs=10),
        "viz.softmax.explorer_logits": dict(z1=1.0),
        "viz.spectral.rotation_matrix": dict(angle=1.0),
        "viz.spectral.fig_intuition": dict(iters=2),
        "viz.spectral.rate_experiment": dict(rhos=(0.5, 0.8), iters=5),
        "viz.spectral.fig_rate": dict(data=spectral.rate_experiment(rhos=(0.5, 0.8), iters=5)),
        "viz.spectral.power_to_residual": dict(A=W @ W.T, tol=1e-6, max_iters=1000),
        "viz.spectral.kps_steps": dict(gamma=0.5, tan2=1.0, rtol=1e-6),
        "viz.spectral.cost_experiment": dict(gaps=(0.1, 0.5), n=10),
        "viz.spectral_normalisation.random_mlp": dict(widths=(3, 4, 2)),
        "viz.spectral_normalisation.relu_mlp_search": dict(
            weights=spectral_normalisation.random_mlp((3, 4, 2)), restarts=1, gens=2, pool=8),
        "viz.spectral_normalisation.paired_pattern_bound": dict(
            weights=spectral_normalisation.random_mlp((3, 4, 2))),
        "viz.spectral_normalisation.mlp_bounds": dict(depths=(1, 2), width=3, samples=5),
        "viz.spectral_normalisation.pytorch_eval_sigma": dict(W=W, u=np.ones(3), v=np.ones(3)),
        "viz.spectral_normalisation.sn_weight_vjp": dict(W=W, u=np.ones(3), v=np.ones(3), G=W),
        "viz.spectral_normalisation.random_logit_entropies": dict(T=4, s=np.array([0.5, 1.0]),
                                                                  samples=5),
        "viz.spectral_normalisation.fig_entropy_floor": dict(Ts=(2, 4), samples=5),
    }


#: (callable, argument) pairs whose kind the annotation does not say.
KINDS = {
    "audit.Claim.number": "count", "audit.Claim.parts": "obj", "audit.Claim.refs": "obj",
    "audit.Claim.trap": "obj", "audit.Claim.chapter": "choice", "audit.Part.verdict": "choice",
    "audit.claim.number": "count", "audit.claim_box.number": "count",
    "audit.section_label.number": "count",
    "audit.interview_answer.chapter": "choice", "audit.interview_answer.lang": "choice",
    "audit.traps.lang": "choice", "audit.scale_list.lang": "choice",
    "audit.verdict_table.lang": "choice", "audit.claim_box.lang": "choice",
    "quiz.Quiz.lang": "choice",
    "quiz.Quiz.from_yaml.lang": "choice", "quiz.Quiz.from_yaml.path": "obj",
    "quiz.Quiz.from_yaml.select": "counts", "quiz.Quiz.glue_yaml.path": "obj",
    "quiz.Quiz.glue_yaml.select": "counts", "quiz.stale_fields.path": "obj",
    "interview.stale_texts.data": "obj",
    "interview.load.chapter": "choice", "interview.stale_fields.chapter": "choice",
    "interview.answer.chapter": "choice", "interview.answer.lang": "choice",
    "interview.question.chapter": "choice", "interview.question.lang": "choice",
    "interview.en_hash.text": "text", "interview.load.folder": "obj",
    "interview.stale_fields.folder": "obj", "pretrained.load.path": "obj",
    "viz.prenorm.grid_index.lr": "pos", "viz.prenorm.fig_last_layer.depths": "floats",
    "viz.prenorm.fig_amplification.depths": "floats", "viz.real.fig_variants.ts": "floats",
    "viz.logits.logit_sweep.lrs": "floats", "viz.logits.logit_sweep.seeds": "counts",
    "viz.logits.summary.big": "pos", "viz.logits.summary.learned": "pos",
    "pretrained.measure.scales": "floats", "pretrained.measure.tokens": "array",
    "viz.logits.attention_constants.tokens": "array", "viz.logits.head_bounds.tokens": "array",
    "viz.real.branch_constants.H": "array", "viz.real.head_constants.X": "array",
    "viz.real.branch_constants.tol": "pos", "viz.real.head_constants.tol": "pos",
    "viz.logits.attention_constants.tol": "pos", "viz.logits.head_bounds.tol": "pos",
    "plotting.phone_min_width.css_width": "pos", "plotting.phone_min_width.min_font_px": "pos",
    "plotting.figure.width": "pos", "plotting.figure.height": "pos",
    "widgets.Slider.kind": "choice", "explorers.get_explorer.name": "choice",
    "viz.collapse.mlp_weights.lip": "pos", "viz.collapse.fig_intro.scale": "pos",
    "viz.collapse.leading_coefficient_table.scale": "pos",
    "viz.collapse.signature_run.scale": "pos", "viz.collapse.skip_curves.scale": "pos",
    "viz.collapse.fig_skips.scale": "pos", "viz.collapse.regime_grid.scales": "array",
    "viz.collapse.fig_regime.alive": "pos", "viz.collapse.mlp_curves.lips": "floats",
    "viz.collapse.init_sharpness.ds": "counts",
    "viz.lipschitz.tokens.config": "choice", "viz.lipschitz.growth_curves.config": "choice",
    "viz.lipschitz.growth_curves.ts": "array", "viz.lipschitz.sink_table.radii": "array",
    "viz.lipschitz.sink_table.Ns": "counts", "viz.lipschitz.fig_sqrt_n.Ns": "counts",
    "viz.lipschitz.cost_table.sizes": "obj",
    "viz.real.random_model.layout": "choice", "viz.real.depth_profile.layout": "choice",
    "viz.real.depth_profile.depths": "counts", "viz.real.variant_layer.name": "choice",
    "viz.real.variant_constant.name": "choice", "viz.real.scale_curves.family": "choice",
    "viz.real.scale_curves.ts": "floats",
    "viz.real.variant_constant.W_Q": "array", "viz.real.variant_constant.W_K": "array",
    "viz.real.variant_constant.W_V": "array",
    "viz.scaling.fig_mechanism.sigmas": "floats", "viz.scaling.fig_two_token_sigma.mc_sigmas":
    "floats", "viz.scaling.fig_rem.n_keys_list": "counts",
    "viz.softmax.norm_search.box": "pos", "viz.softmax.lipschitz_ratios.ns": "counts",
    "viz.spectral.fig_intuition.rho": "pos", "viz.spectral.rate_experiment.rhos": "floats",
    "viz.spectral.power_to_residual.A": "array", "viz.spectral.power_to_residual.tol": "pos",
    "viz.spectral.kps_steps.gamma": "pos", "viz.spectral.kps_steps.tan2": "pos",
    "viz.spectral.kps_steps.rtol": "pos", "viz.spectral.cost_experiment.gaps": "floats",
    "viz.spectral.cost_experiment.rtol": "pos",
    "viz.spectral_normalisation.random_mlp.widths": "counts",
    "viz.spectral_normalisation.relu_mlp_search.weights": "obj",
    "viz.spectral_normalisation.paired_pattern_bound.weights": "obj",
    "viz.spectral_normalisation.mlp_bounds.depths": "counts",
    "viz.spectral_normalisation.pytorch_eval_sigma.W": "array",
    "viz.spectral_normalisation.pytorch_eval_sigma.u": "array",
    "viz.spectral_normalisation.pytorch_eval_sigma.v": "array",
    "viz.spectral_normalisation.sn_weight_vjp.W": "array",
    "viz.spectral_normalisation.sn_weight_vjp.u": "array",
    "viz.spectral_normalisation.sn_weight_vjp.v": "array",
    "viz.spectral_normalisation.sn_weight_vjp.G": "array",
    "viz.spectral_normalisation.random_logit_entropies.s": "array",
    "viz.spectral_normalisation.fig_entropy_floor.Ts": "counts",
    "lm.checkpoint_dir.name": "text", "lm.weights_sha256.path": "path",
    "lm.attention_stats.tokens": "array", "lm.window_constants.tokens": "array",
    "lm.window_constants.tol": "pos", "lm.window_constants.prefixes": "counts",
    "lm.measure.windows": "array", "lm.measure.tol": "pos", "lm.run_steps.run_dir": "path",
    "lm.trajectory.windows": "array", "lm.trajectory.tol": "pos",
    "lm.cached_trajectory.windows": "array", "lm.cached_trajectory.tol": "pos",
    "lm.cached_trajectory.cache": "outdir", "lm.precompute.path": "path",
    "lm.precompute.run_dir": "path", "lm.precompute.cache": "outdir", "lm.precompute.tol": "pos",
    "lm.read_measurements.path": "path", "lm.recipe.lang": "choice",
    "viz.lm.byte_label.lang": "choice", "bytelm.heldout_windows.text": "obj",
    "lmprobe.update_measurements.path": "path",
    "lmprobe.attention_growth.windows": "array", "lmprobe.attention_growth.lengths": "counts",
    "lmprobe.attention_growth.tol": "pos", "lmprobe.byte_interventions.windows": "array",
    "lmprobe.byte_interventions.tol": "pos",
    "bytelm.heldout_bits.windows": "array", "corpus.stdlib_corpus.root": "path",
    "stability.read_results.path": "path", "stability.train_run.keep_at": "obj",
    "stability.train_run.corpus": "obj", "stability.summarise.runs": "obj",
    "stability.failures.runs": "obj", "stability.late_slope.run": "obj",
    "stability.train_run.mitigations": "obj",
    "stability.mitigation_set.mitigations": "obj", "stability.arm_name.mitigations": "obj",
}

#: Callables the sweep leaves out, with the reason.
SKIP = {
    "plotting.attention_panel": "takes a matplotlib Figure and Axes",
    "plotting.figure_png": "takes a Figure", "plotting.legible": "takes a Figure",
    "plotting.describe": "takes a Figure", "plotting.set_alt": "takes a Figure",
    "plotting.glue_figure": "takes a Figure", "plotting.narrow_copy": "takes a Figure",
    "plotting.use_style": "no arguments", "plotting.setup_notebook": "no arguments",
    "widgets.Explorer": "abstract base; its render is swept per explorer",
    "pretrained.train": "trains for minutes; its seed is checked by init (same validator)",
    "pretrained.main": "the command line (argparse)",
    "pretrained.save": "writes a file", "pretrained.Measurements": "a record of measure",
    "viz.prenorm.training_grid": "no arguments", "viz.prenorm.interventions": "no arguments",
    "viz.collapse_explorers.stack_explorer_data": "no arguments",
    # records that one function returns and the next reads: no public constructor use
    "viz.collapse.SignatureRun": "a record of signature_run",
    "viz.lipschitz.GrowthCurves": "a record of growth_curves",
    "viz.scaling.SaturationCurves": "a record of saturation_curves",
    "viz.scaling_explorers.DExplorerData": "a record of d_explorer_data",
    "viz.softmax.SearchResult": "a record of norm_search",
    "lm.main": "the command line (argparse)", "bytelm.main": "the command line (argparse)",
    "lmprobe.main": "the command line (argparse)",
    "bytelm.train": "trains for minutes (the command line, argparse)",
    "stability.main": "the command line (argparse)",
}


#: Public methods that take arguments (class methods and the like), swept as functions.
METHODS = ("quiz.Quiz.from_yaml", "quiz.Quiz.combine", "quiz.Quiz.glue_yaml")


def _public() -> list[tuple[str, Any]]:
    """(qualname, object) of every name in the modules' ``__all__``, and :data:`METHODS`."""
    out = []
    for m in MODULES:
        mod = importlib.import_module(f"lipattn.book.{m}")
        out += [(f"{m}.{name}", getattr(mod, name)) for name in mod.__all__]
    for qual in METHODS:
        m, cls, meth = qual.rsplit(".", 2)
        out.append((qual, getattr(getattr(importlib.import_module(f"lipattn.book.{m}"), cls),
                                  meth)))
    return out


#: Callables whose good call takes seconds (their own tests run it): no check of it here.
SLOW = {"pretrained.measure", "viz.sensitivity.depth_scan",
        "viz.spectral_normalisation.tracking_summary", "viz.logits.longer_runs",
        "lm.window_constants", "lm.measure", "lm.precompute", "corpus.stdlib_corpus",
        "lmprobe.update_measurements"}


def cases() -> list[tuple[str, Callable, dict[str, Any], str, str, Any, str]]:
    """(qualname, callable, base kwargs, arg, label, bad value, ALWAYS|MAYBE)."""
    cheap = _cheap()
    out = []
    for qual, obj in _public():
        if not callable(obj) or qual in SKIP:
            continue
        if inspect.isclass(obj) and not dataclasses.is_dataclass(obj) and \
                "__init__" not in vars(obj):
            continue  # explorers: no arguments; render is swept below
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        params = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        base = dict(cheap.get(qual, {}))
        missing = [p.name for p in params if p.default is p.empty and p.name not in base]
        for p in params:
            kind = KINDS.get(f"{qual}.{p.name}") or kind_of(p.name, p.annotation, p.default)
            for label, value, how in bad_values(kind):
                if value is None and p.default is None:
                    continue  # None is the default: a valid value
                if missing and missing != [p.name]:
                    out.append((qual, obj, None, p.name, label, value, how))
                else:
                    out.append((qual, obj, base, p.name, label, value, how))
    return out


def render_cases() -> list[tuple[str, Any, str, Any]]:
    """(explorer name, its class, slider name, bad value) for every explorer's sliders."""
    from lipattn.book.explorers import EXPLORERS

    out = []
    for name in sorted(EXPLORERS):
        cls = EXPLORERS[name]
        for spec in cls.slider_specs:
            values = tuple(spec.values)
            first = values[0]
            bad: list[Any] = [NAN, None, "no-such-value", np.array(values[:2], dtype=object)]
            if isinstance(first, (bool, np.bool_)):
                bad += [1, 0]
            elif isinstance(first, (int, float, np.integer, np.floating)):
                bad += [True, float(max(values)) * 1.5 + 1.0]
            out += [(name, cls, spec.name, b) for b in bad]
    return out


def _unbuilt(cls):
    """An explorer with its sliders but no figure: ``render`` checks the values before it
    draws, so a value that passed the check would fail on the missing figure (unclear)."""
    ex = cls.__new__(cls)
    ex._specs = {s.name: s for s in cls.slider_specs}
    return ex


def finite(value: Any, depth: int = 0) -> bool:
    """Whether every number inside a result is finite."""
    if depth > 6:
        return True
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        return True
    if isinstance(value, (int, np.integer)):
        return True
    if isinstance(value, (float, np.floating, complex)):
        return bool(np.isfinite(value))
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc":
            return bool(np.all(np.isfinite(value)))
        if value.dtype == object:
            return all(finite(v, depth + 1) for v in value.ravel())
        return True
    if isinstance(value, dict):
        return all(finite(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(finite(v, depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(finite(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return True


def classify(call: Callable[[], Any], arg: str, how: str) -> tuple[str, str]:
    """('pass'|'nan'|'accepted'|'hang'|'unclear', detail) of one call."""
    from matplotlib.figure import Figure

    signal.setitimer(signal.ITIMER_REAL, PER_CALL_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result = call()
    except _Timeout:
        return "hang", f"ran past {PER_CALL_S} s"
    except (ValueError, TypeError, OverflowError) as exc:
        msg = str(exc)
        if arg in msg:
            return "pass", ""
        return "unclear", f"{type(exc).__name__}: {msg[:160]}"
    except Exception as exc:  # noqa: BLE001 -- any other exception is unclear
        return "unclear", f"{type(exc).__name__}: {str(exc)[:160]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if isinstance(result, Figure):
        import matplotlib.pyplot as plt
        plt.close(result)
    if not finite(result):
        return "nan", "returned NaN or inf"
    if how == ALWAYS:
        return "accepted", f"returned {type(result).__name__}"
    return "pass", ""


def _raise_timeout(*_):
    raise _Timeout


def sweep() -> list[tuple[str, str, str, str, str]]:
    """Run every case; (outcome, qualname, arg, label, detail) for every call."""
    import matplotlib
    matplotlib.use("Agg")
    signal.signal(signal.SIGALRM, _raise_timeout)
    results = []
    seen = set()
    for qual, obj, base, *_ in cases():  # the good arguments themselves must work
        required = [p.name for p in inspect.signature(obj).parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                           p.KEYWORD_ONLY)]
        if base is None or qual in seen or qual in SLOW or any(r not in base for r in required):
            continue
        seen.add(qual)
        outcome, detail = classify(lambda o=obj, k=base: o(**k), "\0", MAYBE)
        results.append((outcome, qual, "(good arguments)", "", detail))
    for qual, obj, base, arg, label, value, how in cases():
        if base is None:
            results.append(("skipped", qual, arg, label, "no cheap good arguments"))
            continue
        kwargs = base | {arg: value}
        outcome, detail = classify(lambda o=obj, k=kwargs: o(**k), arg, how)
        results.append((outcome, qual, arg, label, detail))
    for name, cls, slider, value in render_cases():
        ex = _unbuilt(cls)
        outcome, detail = classify(lambda e=ex, s=slider, v=value: e.render(**{s: v}),
                                   slider, ALWAYS)
        results.append((outcome, f"explorer {name}.render", slider, repr(value)[:30], detail))
    return results


def _in_child() -> list[tuple[str, str, str, str, str]]:
    """The sweep in a forked child with a 4 GB address-space limit."""
    import pickle
    import resource

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        code = 0
        try:
            resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
            data = pickle.dumps(sweep())
        except BaseException as exc:  # noqa: BLE001
            data = pickle.dumps([("crash", "sweep", "", "", repr(exc))])
            code = 1
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else [("crash", "sweep", "", "", "child died")]


def test_every_public_callable_refuses_bad_input_by_name():
    results = _in_child()
    bad = [r for r in results if r[0] not in ("pass", "skipped")]
    calls = sum(r[0] != "skipped" for r in results)
    assert calls > 1500, calls
    assert not bad, f"{len(bad)} of {calls} calls fail:\n" + "\n".join(
        f"  {o:8s} {q}({a}={lab}): {d}" for o, q, a, lab, d in bad)


if __name__ == "__main__":  # the counts, for the issue
    import collections
    import sys
    res = _in_child()
    print(collections.Counter(r[0] for r in res))
    for o, q, a, lab, d in res:
        if o not in ("pass", "skipped") or "-v" in sys.argv:
            print(f"{o:8s} {q}({a}={lab}): {d}")
    for o, q, a, _, d in res:
        if o == "skipped":
            print(f"skipped {q}.{a}: {d}")
