r"""``load``: a Hugging Face checkpoint directory in, a model or a named refusal out.

:func:`load` reads ``config.json`` and the safetensors weights that
``save_pretrained`` writes (:mod:`lipattn.models.checkpoint`), dispatches on
``config["model_type"]`` and returns a :class:`~lipattn.models.gpt2.GPT2` or a
:class:`~lipattn.models.llama.Llama` (the RMSNorm/gated-MLP layout shared by
the Llama-like families), built from the :class:`~lipattn.models.blocks.Layout`
that the family's table gives.

Each family lists the config keys it reads (:data:`FAMILIES`: with their
defaults), the keys known not to change hidden states (dropout, token ids,
initialisation, cache and output flags, the logits' soft-cap ...), and the keys
whose non-default values are not modelled. A config key in none of these lists
(nor among the keys every ``PretrainedConfig`` writes), an unmodelled value, an
unknown ``model_type`` or an unknown RoPE type raises
:class:`NotImplementedError` naming the model_type and the key: the same
tensor names never make one family load as another (a Gemma checkpoint has
Llama's tensor names and is still read as Gemma, from its ``model_type``).

=============  ===============================================================
model_type     what its table sets
=============  ===============================================================
``gpt2``       LayerNorm, Conv1D, ``activation_function``, ``scale_attn_weights``
``llama``      RMSNorm, SiLU-gated MLP, RoPE (``llama3`` scaling), ``attention_bias``,
               ``head_dim``
``mistral``    Llama + ``sliding_window`` on every layer
``qwen2``      Llama + q/k/v biases; sliding window on layers ``>= max_window_layers``
               when ``use_sliding_window`` (or as ``layer_types`` says)
``qwen3``      Qwen2 + per-head RMSNorm of queries and keys (before RoPE)
``gemma``      :math:`(1 + w)` RMSNorm, gelu-tanh gated MLP, embeddings
               :math:`\times\sqrt d`
``gemma2``     Gemma + logit soft-cap, ``query_pre_attn_scalar``, post-norms,
               sliding window on the layers ``layer_types`` names (default: even
               layers 0, 2, ...)
``phi3``       Llama with fused ``qkv_proj`` and ``gate_up_proj`` (split on load),
               ``sliding_window`` on every layer
=============  ===============================================================

Both config generations are read: transformers 5's ``rope_parameters``
(``{"rope_type", "rope_theta", ...}``) and transformers 4's top-level
``rope_theta`` and ``rope_scaling``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..layers.rope import LLAMA3_KEYS
from ._state import check_dtype
from .blocks import Layout, LazyBlocks, build_final, parameter_shapes
from .checkpoint import Checkpoint

__all__ = ["load", "read_config", "layout_from_config", "FAMILIES", "ACTIVATIONS_HF"]

#: Hugging Face activation names (``ACT2FN``) -> lipattn.layers.ACTIVATIONS names.
ACTIVATIONS_HF = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_pytorch_tanh",
                  "gelu": "gelu", "relu": "relu", "silu": "silu", "swish": "silu"}

#: Keys any PretrainedConfig may write that do not change hidden states (v4 and v5).
GENERIC_NO_EFFECT = frozenset("""
_name_or_path _commit_hash architectures dtype torch_dtype transformers_version model_type
id2label label2id num_labels problem_type finetuning_task tokenizer_class prefix
task_specific_params return_dict output_hidden_states output_attentions torchscript
use_bfloat16 tf_legacy_loss chunk_size_feed_forward is_decoder cross_attention_hidden_size
tie_encoder_decoder tie_word_embeddings use_cache bos_token_id eos_token_id pad_token_id
sep_token_id decoder_start_token_id initializer_range max_position_embeddings
_attn_implementation _attn_implementation_autoset _attn_implementation_internal
attn_implementation max_length min_length do_sample early_stopping num_beams num_beam_groups
diversity_penalty temperature top_k top_p typical_p repetition_penalty length_penalty
no_repeat_ngram_size encoder_no_repeat_ngram_size bad_words_ids num_return_sequences
output_scores return_dict_in_generate forced_bos_token_id forced_eos_token_id
remove_invalid_values exponential_decay_length_penalty suppress_tokens begin_suppress_tokens
gradient_checkpointing auto_map custom_pipelines
""".split())

#: Keys any PretrainedConfig may write whose non-default values are not modelled.
GENERIC_FIXED = {"is_encoder_decoder": False, "add_cross_attention": False, "pruned_heads": {},
                 "quantization_config": None}

_LLAMA_READ = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
               "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
               "hidden_act": "silu", "rms_norm_eps": 1e-6, "head_dim": None,
               "rope_parameters": None, "rope_theta": 10000.0, "rope_scaling": None}
_LLAMA_NO_EFFECT = {"attention_dropout", "pretraining_tp"}
_ROPE_ONLY_DEFAULT = {"type", "rope_type", "rope_theta"}

#: model_type -> {"read": {key: default}, "no_effect": set, "fixed": {key: default}}.
FAMILIES: dict[str, dict[str, Any]] = {
    "gpt2": {
        "read": {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
                 "n_head": 12, "n_inner": None, "activation_function": "gelu_new",
                 "layer_norm_epsilon": 1e-5, "scale_attn_weights": True},
        "no_effect": {"resid_pdrop", "embd_pdrop", "attn_pdrop", "n_ctx", "summary_type",
                      "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                      "summary_first_dropout"},
        "fixed": {"scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False},
    },
    "llama": {"read": {**_LLAMA_READ, "attention_bias": False},
              "no_effect": _LLAMA_NO_EFFECT, "fixed": {"mlp_bias": False}},
    "mistral": {"read": {**_LLAMA_READ, "intermediate_size": 14336, "num_key_value_heads": 8,
                         "sliding_window": 4096},
                "no_effect": {"attention_dropout"}, "fixed": {}},
    "qwen2": {"read": {**_LLAMA_READ, "vocab_size": 151936, "intermediate_size": 22016,
                       "num_key_value_heads": 32, "use_sliding_window": False,
                       "sliding_window": 4096, "max_window_layers": 28, "layer_types": None},
              "no_effect": {"attention_dropout"}, "fixed": {}},
    "qwen3": {"read": {**_LLAMA_READ, "vocab_size": 151936, "intermediate_size": 22016,
                       "num_key_value_heads": 32, "head_dim": 128, "attention_bias": False,
                       "use_sliding_window": False, "sliding_window": 4096,
                       "max_window_layers": 28, "layer_types": None},
              "no_effect": {"attention_dropout"}, "fixed": {}},
    "gemma": {"read": {**_LLAMA_READ, "vocab_size": 256000, "hidden_size": 3072,
                       "intermediate_size": 24576, "num_hidden_layers": 28,
                       "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
                       "hidden_act": "gelu_pytorch_tanh", "hidden_activation": None,
                       "attention_bias": False},
              "no_effect": {"attention_dropout"},
              "fixed": {"use_bidirectional_attention": None}},
    "gemma2": {"read": {**{k: v for k, v in _LLAMA_READ.items() if k != "hidden_act"},
                        "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                        "num_hidden_layers": 26, "num_attention_heads": 8,
                        "num_key_value_heads": 4, "head_dim": 256,
                        "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False,
                        "query_pre_attn_scalar": 256, "sliding_window": 4096,
                        "layer_types": None, "attn_logit_softcapping": 50.0},
               # hidden_act: written by transformers 4, which read hidden_activation
               "no_effect": {"attention_dropout", "final_logit_softcapping",
                             "cache_implementation", "hidden_act"},
               "fixed": {"use_bidirectional_attention": None}},
    "phi3": {"read": {**_LLAMA_READ, "vocab_size": 32064, "hidden_size": 3072,
                      "intermediate_size": 8192, "rms_norm_eps": 1e-5,
                      "sliding_window": None, "partial_rotary_factor": 1.0},
             "no_effect": {"attention_dropout", "resid_pdrop", "embd_pdrop",
                           "original_max_position_embeddings"},
             # transformers 4 wrote attention_bias for Phi-3; its projections have no bias
             "fixed": {"attention_bias": False}},
}


def _refuse(model_type: str, what: str) -> NotImplementedError:
    return NotImplementedError(f"model_type {model_type!r}: {what} is not modelled by lipattn")


def read_config(path: str | os.PathLike) -> dict:
    """``config.json`` of a checkpoint directory (or the file itself), as a dict."""
    p = Path(path)
    f = p / "config.json" if p.is_dir() else p
    if not f.is_file():
        raise FileNotFoundError(f"{f} not found: load needs a directory written by "
                                "save_pretrained (config.json and model.safetensors)")
    try:
        config = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{f} is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{f} must hold a JSON object; got {type(config).__name__}")
    return config


# -- typed reads of config values ------------------------------------------------
def _int(cfg: dict, key: str, minimum: int = 1) -> int:
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
        raise ValueError(f"config[{key!r}] must be an integer >= {minimum}; got {v!r}")
    return int(v)


def _float(cfg: dict, key: str, positive: bool = True) -> float:
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or (
            positive and v <= 0):
        raise ValueError(f"config[{key!r}] must be a finite {'positive ' if positive else ''}"
                         f"number; got {v!r}")
    return float(v)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (a == b and type(a) is type(b))
    return a == b


def _check_keys(model_type: str, config: dict) -> dict:
    """The config with every family key filled in; NotImplementedError for the rest."""
    fam = FAMILIES[model_type]
    out = dict(fam["read"])
    for key, value in config.items():
        if key in fam["read"]:
            out[key] = value
        elif key in GENERIC_NO_EFFECT or key in fam["no_effect"]:
            continue
        elif key == "sliding_window_size" and model_type == "gemma2" and _same(
                value, config.get("sliding_window")):
            continue                     # an early Gemma 2 config's copy of sliding_window
        elif key in fam["fixed"] or key in GENERIC_FIXED:
            default = fam["fixed"].get(key, GENERIC_FIXED.get(key))
            ok = _same(value, default) or (default is None and value is False) or (
                default == {} and value in (None, {}))
            if not ok:
                raise _refuse(model_type, f"config[{key!r}] = {value!r} (only {default!r})")
        else:
            raise _refuse(model_type, f"the config key {key!r} (unknown to its table, so its "
                          "effect on hidden states is unknown)")
    return out


def _rope(model_type: str, cfg: dict, head_dim: int) -> tuple[float, dict | None]:
    """(theta, llama3 scaling or None) from rope_parameters (v5) or rope_theta/rope_scaling (v4)."""
    params = cfg["rope_parameters"]
    if params is not None and cfg["rope_scaling"] is not None:
        raise ValueError("config has both 'rope_parameters' and 'rope_scaling'; expected one "
                         "(transformers 5 writes rope_parameters, transformers 4 rope_scaling)")
    given = params if params is not None else (cfg["rope_scaling"] or {})
    if not isinstance(given, dict):
        key = "rope_parameters" if params is not None else "rope_scaling"
        raise ValueError(f"config[{key!r}] must be a JSON object; got {given!r}")
    rope = dict(given)
    if "rope_theta" not in rope:
        rope["rope_theta"] = cfg["rope_theta"]
    elif params is None and cfg["rope_theta"] != rope["rope_theta"]:
        raise ValueError("config's rope_theta and rope_scaling['rope_theta'] differ")
    rope_type = rope.pop("rope_type", None) or rope.pop("type", None) or "default"
    rope.pop("type", None)
    theta = _float(rope, "rope_theta")
    partial = rope.pop("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise _refuse(model_type, f"partial_rotary_factor = {partial!r} (only 1.0)")
    rope.pop("rope_theta")
    if rope_type == "default":
        if rope:
            raise _refuse(model_type, f"the RoPE parameters {sorted(rope)} of rope_type "
                          "'default'")
        return theta, None
    if rope_type != "llama3":
        raise _refuse(model_type, f"rope_type {rope_type!r} (lipattn models 'default' and "
                      "'llama3')")
    missing = [k for k in LLAMA3_KEYS if k not in rope]
    if missing:
        raise ValueError(f"config's llama3 RoPE scaling is missing {missing}")
    extra = sorted(set(rope) - set(LLAMA3_KEYS) - {"attention_factor"})
    if extra or rope.get("attention_factor", 1.0) != 1.0:
        raise _refuse(model_type, f"the llama3 RoPE parameters {extra or ['attention_factor']}")
    vals = {k: _float(rope, k) for k in LLAMA3_KEYS}
    if not vals["high_freq_factor"] > vals["low_freq_factor"]:
        raise ValueError("config's llama3 RoPE scaling needs high_freq_factor > low_freq_factor; "
                         f"got {vals['high_freq_factor']} and {vals['low_freq_factor']}")
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim; got {head_dim}")
    return theta, {"rope_type": "llama3", **vals}


def _act(model_type: str, name: Any, key: str) -> str:
    if name not in ACTIVATIONS_HF:
        raise _refuse(model_type, f"config[{key!r}] = {name!r} (lipattn has "
                      f"{', '.join(sorted(ACTIVATIONS_HF))})")
    return ACTIVATIONS_HF[name]


def _windows(model_type: str, cfg: dict, L: int) -> tuple:
    """Per-layer sliding windows (int or None), as each family's modelling code sets them."""
    def window() -> int:
        return _int(cfg, "sliding_window")

    if model_type in ("mistral", "phi3"):
        return (window() if cfg["sliding_window"] is not None else None,) * L
    if model_type in ("qwen2", "qwen3"):
        w = window() if cfg["use_sliding_window"] and cfg["sliding_window"] is not None else None
        types = cfg["layer_types"]
        if types is None:
            first = _int(cfg, "max_window_layers", 0)
            types = ["sliding_attention" if w is not None and i >= first else "full_attention"
                     for i in range(L)]
    elif model_type == "gemma2":
        w = None if cfg["sliding_window"] is None else window()
        types = cfg["layer_types"]
        if types is None:
            types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    else:
        return ()
    if not isinstance(types, list) or len(types) != L:
        raise ValueError(f"config['layer_types'] must list one type per layer ({L}); got "
                         f"{types!r}")
    out = []
    for i, t in enumerate(types):
        if t not in ("full_attention", "sliding_attention"):
            raise _refuse(model_type, f"layer_types[{i}] = {t!r}")
        if t == "sliding_attention" and w is None:
            raise ValueError(f"config['layer_types'][{i}] is 'sliding_attention' but the config "
                             "gives no sliding_window (or use_sliding_window is false)")
        out.append(w if t == "sliding_attention" else None)
    return tuple(out)


def layout_from_config(config: dict) -> Layout:
    """The :class:`~lipattn.models.blocks.Layout` of a Hugging Face config (a dict).

    Raises
    ------
    NotImplementedError
        An unknown or missing ``model_type``; a key its family does not know; a
        non-default value of an unmodelled option (naming model_type and key).
    ValueError
        A value of the wrong type or range, naming the key.
    """
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict (config.json); got {type(config).__name__}")
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise NotImplementedError(
            f"model_type {model_type!r} is not modelled by lipattn (it reads "
            f"{', '.join(sorted(FAMILIES))})" + ("; config.json has no 'model_type'"
                                                  if model_type is None else ""))
    cfg = _check_keys(model_type, config)
    if model_type == "gpt2":
        d, n_head = _int(cfg, "n_embd"), _int(cfg, "n_head")
        if d % n_head:
            raise ValueError(f"config['n_head'] = {n_head} must divide n_embd = {d}")
        scale = None if cfg["scale_attn_weights"] else 1.0
        if not isinstance(cfg["scale_attn_weights"], bool):
            raise ValueError("config['scale_attn_weights'] must be true or false")
        return Layout(model_type, "gpt2", d, _int(cfg, "n_layer"), n_head, n_head, d // n_head,
                      4 * d if cfg["n_inner"] is None else _int(cfg, "n_inner"),
                      _int(cfg, "vocab_size"), _float(cfg, "layer_norm_epsilon"),
                      _act(model_type, cfg["activation_function"], "activation_function"),
                      n_positions=_int(cfg, "n_positions"),
                      scale=scale)

    d, L = _int(cfg, "hidden_size"), _int(cfg, "num_hidden_layers")
    n_head = _int(cfg, "num_attention_heads")
    n_kv = n_head if cfg["num_key_value_heads"] is None else _int(cfg, "num_key_value_heads")
    if n_head % n_kv:
        raise ValueError(f"config['num_key_value_heads'] = {n_kv} must divide "
                         f"num_attention_heads = {n_head}")
    if cfg["head_dim"] is None:
        if d % n_head:
            raise ValueError(f"config['num_attention_heads'] = {n_head} must divide "
                             f"hidden_size = {d} (or the config must give head_dim)")
        dh = d // n_head
    else:
        dh = _int(cfg, "head_dim")
    theta, scaling = _rope(model_type, cfg, dh)
    if dh % 2:
        raise ValueError(f"RoPE needs an even head_dim; got {dh}")
    kw: dict[str, Any] = {}
    if model_type == "gemma":
        act_key = "hidden_activation" if cfg["hidden_activation"] is not None else "hidden_act"
        name = cfg[act_key]
        if act_key == "hidden_activation" and cfg["hidden_act"] not in (name, "gelu"):
            raise _refuse(model_type, f"hidden_act = {cfg['hidden_act']!r} with "
                          f"hidden_activation = {name!r} (the two disagree)")
        # GemmaConfig: hidden_act "gelu" (the original releases) means the tanh approximation
        act = _act(model_type, "gelu_pytorch_tanh" if name == "gelu" else name, act_key)
    elif model_type == "gemma2":
        act = _act(model_type, cfg["hidden_activation"], "hidden_activation")
    else:
        act = _act(model_type, cfg["hidden_act"], "hidden_act")
    if model_type in ("gemma", "gemma2"):
        kw.update(norm_offset=1.0, embed_scale=True)
    if model_type == "gemma2":
        kw.update(post_norms=True, scale=_float(cfg, "query_pre_attn_scalar") ** -0.5,
                  softcap=(None if cfg["attn_logit_softcapping"] is None
                           else _float(cfg, "attn_logit_softcapping")))
    if model_type == "qwen2":
        kw.update(biases=frozenset("qkv"))
    if "attention_bias" in cfg:
        if not isinstance(cfg["attention_bias"], bool):
            raise ValueError("config['attention_bias'] must be true or false")
        if cfg["attention_bias"]:
            kw.update(biases=frozenset("qkvo"))
    if model_type == "qwen3":
        kw.update(qk_norm=True)
    if model_type == "phi3":
        kw.update(fused_qkv=True, fused_gate_up=True)
    return Layout(model_type, "llama", d, L, n_head, n_kv, dh, _int(cfg, "intermediate_size"),
                  _int(cfg, "vocab_size"), _float(cfg, "rms_norm_eps"), act,
                  rope_theta=theta, rope_scaling=scaling,
                  sliding_windows=_windows(model_type, cfg, L), **kw)


# -- load ---------------------------------------------------------------------------
_PREFIXES = ("model.", "transformer.")
_IGNORED = (r"lm_head\.weight", r"(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq",
            r"h\.\d+\.attn\.(masked_)?bias")


def _names(ckpt: Checkpoint, lay: Layout) -> dict[str, str]:
    """HF name (prefix stripped) -> checkpoint name, every expected tensor checked by shape."""
    want = parameter_shapes(lay)
    names: dict[str, str] = {}
    extra = []
    for full in ckpt.tensors:
        name = full
        for p in _PREFIXES:
            if name.startswith(p) and name[len(p):] in want:
                name = name[len(p):]
                break
        if name in want:
            names[name] = full
        elif not any(re.fullmatch(r"(model\.|transformer\.)?" + pat, full) for pat in _IGNORED):
            extra.append(full)
    missing = [k for k in want if k not in names]
    if missing:
        raise ValueError(f"the checkpoint has no tensor {missing[0]!r} (a {lay.model_type} "
                         f"layout of {lay.n_layer} layers needs {len(want)} tensors; "
                         f"{len(missing)} missing)")
    if extra:
        shown = ", ".join(repr(k) for k in sorted(extra)[:6]) + (" ..." if len(extra) > 6 else "")
        raise NotImplementedError(f"model_type {lay.model_type!r}: the checkpoint has "
                                  f"{len(extra)} tensor(s) its layout does not use: {shown}")
    for name, shape in want.items():
        got = ckpt.tensors[names[name]].shape
        if got != shape:
            raise ValueError(f"tensor {names[name]!r} has shape {got}; the config gives "
                             f"{shape} (hidden_size {lay.d_model}, {lay.n_head} heads, "
                             f"{lay.n_kv_head} kv heads, head_dim {lay.head_dim}, "
                             f"intermediate {lay.d_ff}, vocab {lay.vocab})")
    return names


def load(path: str | os.PathLike, *, dtype=np.float64):
    r"""The model saved in a Hugging Face checkpoint directory, or a named refusal.

    Reads ``config.json`` and ``model.safetensors`` (or the shards of
    ``model.safetensors.index.json``) as ``save_pretrained`` writes them, for
    the model_types of :data:`FAMILIES` (see the module docstring). Tensors
    are read lazily: the names and shapes of every tensor are checked at once,
    and each block's weights are read (and converted exactly from float32,
    float16 or bfloat16) when that block is used, so a model larger than memory
    still gives the constant of one block, holding one block at a time.

    Parameters
    ----------
    path : str or path-like
        The directory.
    dtype : numpy.float64 (default) or numpy.float32
        The model's storage and computation dtype ("Precision" in
        :mod:`lipattn.models.decoder`).

    Returns
    -------
    GPT2 or Llama
        With ``model_type``, ``config`` (the dict read) and ``layout``
        (:class:`~lipattn.models.blocks.Layout`) attributes; each block's
        ``sliding_window`` (int or None) is the window its family's modelling
        code gives that layer.

    Raises
    ------
    NotImplementedError
        An unknown model_type, a config key or value that is not modelled, a
        RoPE type other than default and llama3, tensors the layout does not use
        -- each named.
    FileNotFoundError, ValueError, TypeError
        A missing file, a malformed config or safetensors file, a missing
        tensor, a wrong shape, a non-finite weight -- each named.
    """
    from .gpt2 import GPT2
    from .llama import Llama

    dtype = check_dtype(dtype)
    config = read_config(path)
    lay = layout_from_config(config)
    ckpt = Checkpoint(path)
    names = _names(ckpt, lay)
    tensors = {k: ckpt.tensors[v] for k, v in names.items()}

    def get(name: str, shape: tuple) -> np.ndarray:
        arr = tensors[name].read(dtype)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"tensor {names[name]!r} must be finite; it has "
                             f"{int(np.sum(~np.isfinite(arr)))} non-finite entries")
        return arr

    blocks = LazyBlocks(lay, get)
    final = build_final(lay, get)
    common = {"n_head": lay.n_head, "n_kv_head": lay.n_kv_head, "dtype": dtype,
              "d_model": lay.d_model, "head_dim": lay.head_dim}
    if lay.style == "gpt2":
        model = GPT2(blocks, final, **common)
        model.wte, model.wpe = tensors["wte.weight"], tensors["wpe.weight"]
    else:
        model = Llama(blocks, final, **common)
        model.embed_tokens = tensors["embed_tokens.weight"]
        model.rope_theta = lay.rope_theta
        model.embed_scale = (np.sqrt(np.asarray(lay.d_model, dtype)) if lay.embed_scale
                             else None)
    model.eps, model.model_type, model.config, model.layout = lay.eps, lay.model_type, config, lay
    return model
