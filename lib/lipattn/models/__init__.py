"""The models built from :mod:`lipattn.layers`: real decoders loaded from Hugging Face
checkpoints, and the book's own encoder with its training.

- :func:`load` (:mod:`~lipattn.models.families`): a ``save_pretrained``
  directory (``config.json`` and safetensors, read lazily) in, a model out, for
  the model_types gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2 and phi3, or
  a ``NotImplementedError`` naming what is not modelled;
- :class:`GPT2` (:mod:`~lipattn.models.gpt2`) and :class:`Llama`
  (:mod:`~lipattn.models.llama`): ``from_state_dict``, ``embed``, ``forward``,
  ``jvp``, ``vjp``, and exact local Lipschitz constants of any range of blocks
  (``local_lipschitz``), of each sublayer (``sublayer_lipschitz``), of each
  head (``head_lipschitz``) and of one output row (``row_lipschitz``); their
  ``_info`` variants add the certificate and the top singular vectors
  (``input_direction``, ``output_direction``; ``token_sensitivity`` is the
  first one's norm per token); every method takes ``attention_mask``
  (padding, as Hugging Face's) and the constants a ``seed``;
- :mod:`~lipattn.models.masks`: the causal, sliding-window and padding masks,
  built once, as Hugging Face's masking utilities build them;
- ``python -m lipattn.models report PATH --tokens 1,2,3``
  (:mod:`~lipattn.models.report`): the per-layer table of a checkpoint's
  constants, with a progress bar and an optional figure;
- :class:`Decoder` and :class:`Block` (:mod:`~lipattn.models.decoder`): the
  pre-norm stack they share;
- :func:`random_state_dict` (:mod:`~lipattn.models.init`): random state dicts
  with Hugging Face's names, initialised as GPT-2 and Llama are;
- :mod:`~lipattn.models.encoder`: the book's small Post-LN and Pre-LN encoder, a
  :class:`~lipattn.layers.Sequential` of the layers (not imported by this package's
  ``__init__``: ``from lipattn.models import encoder``), whose parameters' layout,
  initialisation and validation are :mod:`~lipattn.models.encoder_params` (re-exported
  by ``encoder``);
- :mod:`~lipattn.models.training`: Adam through the layers' ``backward``, on sequence
  reversal for the encoder (``train_reversal``) and on any stack (``train_stack``);
- :mod:`~lipattn.models.encoder_sublayers`: exact local constants of the encoder's
  attention sublayers, beside the bounds.
"""

from .decoder import Block, Decoder
from .families import load
from .gpt2 import GPT2
from .init import random_state_dict
from .llama import Llama

__all__ = ["load", "GPT2", "Llama", "Decoder", "Block", "random_state_dict"]
