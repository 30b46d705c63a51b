r"""The card's claims, audited: one data structure for the audit and the review sheets.

The interview card behind this book makes eight claims. :data:`CLAIMS` holds,
for each, the card's wording, the verdict on each of its parts, the correct
statement, the chapter and theorem that settle it, and the one-line "trap"
of the review sheets (in English and Chinese). The audit page renders its
table (:func:`verdict_table`) and the box at the head of each section
(:func:`claim_box`) from it, and the review sheets render their list of
traps (:func:`traps`) from it, so none of them can disagree with another.
The chapters and both review sheets render each chapter's interview answer
from its bilingual source (:func:`interview_answer`) instead of repeating it.

Rendered text is MyST Markdown (``$...$`` math, ``{prf:ref}``, ``{doc}`` and
``{ref}`` roles), meant for myst-nb's ``{glue:md}`` with ``:format: myst``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .._validate import as_choice, as_int_at_least
from . import interview
from ._check import as_text

__all__ = ["VERDICTS", "SCALE", "Part", "Claim", "CLAIMS", "claim", "verdict_table",
           "claim_box", "scale_list", "traps", "section_label", "interview_answer"]

#: The verdicts, from best to worst.
VERDICTS: tuple[str, ...] = ("true", "true but loose", "imprecise", "false", "ill-posed")

#: The one scale every verdict is given on. A verdict says what *kind* of error a
#: claim makes, whatever its size; each part's ``size`` says how large it is.
SCALE: dict[str, str] = {
    "true": "correct as stated.",
    "true but loose": "a correct bound that a sharper one replaces.",
    "imprecise": "right in outline, or in some settings, but wrong as a general "
                 "statement in its rate, its conditions or the object it is about.",
    "false": "contradicted, as worded, by a counterexample on the page that no reading "
             "of the claim excludes, however small the discrepancy.",
    "ill-posed": "not a statement that could be proved or refuted as worded.",
}

#: Verdict words in the review sheets' languages.
_VERDICT_WORDS = {
    "en": {v: v for v in VERDICTS},
    "zh": {"true": "正确", "true but loose": "正确但不紧", "imprecise": "不精确",
           "false": "错误", "ill-posed": "提法不当"},
}


@dataclass(frozen=True)
class Part:
    """One checkable part of a claim and its verdict.

    Attributes
    ----------
    says : str
        The part, as the card says it (MyST Markdown).
    verdict : str
        One of :data:`VERDICTS`, on the scale :data:`SCALE`.
    size : str
        How large the discrepancy is (MyST Markdown, no measured numbers: those
        are glued on the audit page).
    """

    says: str
    verdict: str
    size: str

    def __post_init__(self) -> None:
        as_choice(self.verdict, "verdict", VERDICTS)
        for name in ("says", "size"):
            as_text(getattr(self, name), name)


@dataclass(frozen=True)
class Claim:
    """One claim of the card.

    Attributes
    ----------
    number : int
        1 to 8, the card's order.
    topic : str
        A short title, used as the heading of the claim's section.
    parts : tuple of Part
        The claim, split where its parts get different verdicts.
    correct : str
        The correct statement (MyST Markdown), shown in the claim's box.
    short : str
        The correct statement in a few words, for the table.
    chapter : str
        The document that settles it, e.g. ``"01_softmax_jacobian"``.
    refs : tuple of str
        ``prf`` labels in that chapter (may be empty).
    trap : dict
        The one-line trap of the review sheets, ``{"en": ..., "zh": ...}``.
    """

    number: int
    topic: str
    parts: tuple[Part, ...]
    correct: str
    short: str
    chapter: str
    refs: tuple[str, ...]
    trap: dict[str, str]

    def __post_init__(self) -> None:
        as_int_at_least(self.number, "number", 1, 99)
        for name in ("topic", "correct", "short"):
            as_text(getattr(self, name), name)
        as_choice(self.chapter, "chapter", interview.CHAPTERS)
        if not isinstance(self.parts, tuple) or not all(isinstance(p, Part) for p in self.parts):
            raise TypeError(f"claim {self.number}: parts must be a tuple of Part; "
                            f"got {type(self.parts).__name__}")
        if not self.parts:
            raise ValueError(f"claim {self.number}: parts must not be empty")
        if not isinstance(self.refs, tuple):
            raise TypeError(f"claim {self.number}: refs must be a tuple of prf labels; "
                            f"got {type(self.refs).__name__}")
        for r in self.refs:
            as_text(r, "each entry of refs")
        if not isinstance(self.trap, dict):
            raise TypeError(f"claim {self.number}: trap must be a dict language -> text; "
                            f"got {type(self.trap).__name__}")
        missing = set(_VERDICT_WORDS) - set(self.trap)
        if missing:
            raise ValueError(f"claim {self.number}: trap must have languages {sorted(missing)}")
        for lang, text in self.trap.items():
            as_text(text, f"trap[{lang!r}]")

    @property
    def says(self) -> str:
        """The whole claim as the card says it."""
        return " ".join(p.says for p in self.parts)

    @property
    def verdicts(self) -> tuple[str, ...]:
        """The verdicts of the parts, in order."""
        return tuple(p.verdict for p in self.parts)


CLAIMS: tuple[Claim, ...] = (
    Claim(
        1, "The norm of the softmax Jacobian",
        (Part(r"The spectral norm of the softmax Jacobian $\diag(p) - pp^\top$ is bounded by 1.",
              "true but loose", r"a factor 2: the sharp bound is $\frac12$."),),
        r"$\|J(z)\|_2 \le \frac12$ for every $z$; the supremum $\frac12$ is attained for $n = 2$ "
        r"equal logits and approached for $n \ge 3$ when two logits tie at the top and the "
        r"others tend to $-\infty$.",
        r"$\|J\|_2 \le \frac12$, and $\frac12$ is sharp.",
        "01_softmax_jacobian", ("thm-tight",),
        {"en": r"$\|\diag(p) - pp^\top\|_2 \le 1$ is true but loose: the sharp bound is "
               r"$\frac12$ (a variance of values in $[\min v, \max v]$, Popoviciu).",
         "zh": r"$\|\diag(p) - pp^\top\|_2 \le 1$ 成立但不紧：最优界是 $\frac12$"
               r"（这个二次型是取值于 $[\min v, \max v]$ 的量的方差，由 Popoviciu 不等式即得）。"},
    ),
    Claim(
        2, "The Lipschitz constant of the softmax",
        (Part(r"The softmax's Lipschitz constant is exactly 1 in $\ell_\infty$", "false",
              r"a factor 2: the constant is $\frac12$, at every $N$."),
         Part(r"and at most $\sqrt N$ in $\ell_2$.", "true but loose",
              r"a factor $2\sqrt N$: $\frac12$ against $\sqrt N$.")),
        r"The best constant is $\frac12$ in both $\ell_2$ and $\ell_\infty$, for every $N$; "
        r"$\frac{1}{2\tau}$ with temperature $\tau$.",
        r"$\frac12$ in $\ell_2$ and in $\ell_\infty$, for every $N$.",
        "01_softmax_jacobian", ("thm-softmax-lipschitz",),
        {"en": r"The softmax is $\frac12$-Lipschitz in $\ell_2$ and $\ell_\infty$: not "
               r"“exactly 1”, and no $\sqrt N$.",
         "zh": r"softmax 在 $\ell_2$ 与 $\ell_\infty$ 下的 Lipschitz 常数都是 $\frac12$："
               r"不是“恰好为 1”，也没有 $\sqrt N$ 因子。"},
    ),
    Claim(
        3, "The $1/\\sqrt d$ scaling and saturation",
        (Part(r"Without the $1/\sqrt d$ scaling, the softmax input's variance grows with $d$,",
              "true", r"none: the variance is $d_k$ exactly."),
         Part(r"so the Jacobian saturates rapidly towards 0 (vanishing gradients).",
              "imprecise", r"in the rate: $\mathbb E\|J\|_2$ falls like $1/\sigma$, not "
              r"exponentially, and the $W_Q$ gradient vanishes for typical queries only, "
              r"not on average.")),
        r"$\Var(q \cdot k) = d_k$ exactly. Each typical query saturates exponentially in its "
        r"logit gap, but on average only polynomially: "
        r"$\mathbb E\|J\|_2 = \Theta(1/\sigma)$, about $d_k^{-1/2}$, held up by near-ties. "
        r"The logit gradient shrinks, and so does the query gradient of most queries; "
        r"a few near-tie queries get large ones, so the $W_Q$ gradient stays of order 1 "
        r"on average, heavy-tailed.",
        r"Variance $d_k$; on average saturation like $1/\sigma$, not exponential; the $W_Q$ "
        r"gradient vanishes for typical queries only.",
        "02_scaling_saturation", ("thm-dot-moments", "thm-n-key"),
        {"en": r"Without $1/\sqrt{d_k}$, each query saturates exponentially in its logit gap, "
               r"but on average saturation is polynomial ($\mathbb E\|J\|_2 = \Theta(1/\sigma)$); "
               r"the $W_Q$ gradient vanishes for most queries but not on average.",
         "zh": r"不除以 $\sqrt{d_k}$ 时，单个 query 按其 logit 间隔指数级饱和，但平均意义下的饱和"
               r"只是多项式级的（$\mathbb E\|J\|_2 = \Theta(1/\sigma)$）；大多数 query 的梯度确实"
               r"消失了，但 $W_Q$ 的平均梯度并不消失。"},
    ),
    Claim(
        4, "Rank collapse without residual connections",
        (Part(r"Without residual connections, a stack of pure self-attention layers makes all "
              r"token vectors converge exponentially to one vector (rank collapse).",
              "imprecise", r"in the rate, towards faster (doubly exponential once near "
              r"collapse), and in the conditions (large weights can hold the tokens apart "
              r"for several layers first)."),),
        r"Near collapse one layer cubes the residual, "
        r"$\|\mathrm{res}\, f(X)\|_F \le c\,\|\mathrm{res}\, X\|_F^3$: the convergence is "
        r"doubly exponential, once $c\|\mathrm{res}\|_F^2 < 1$. Large weights can hold the "
        r"tokens apart for several layers first; plain skips only slow the relative "
        r"residual to a geometric decay.",
        r"Doubly exponential near collapse (the residual is cubed per layer), and only under "
        r"conditions.",
        "03_rank_collapse", ("thm-cubic", "cor-unroll"),
        {"en": r"Pure attention collapses *doubly* exponentially near collapse (one layer "
               r"cubes the tokens' deviation from their mean), and only once that deviation "
               r"is small; with plain, unscaled skip connections the rank survives, but the "
               r"relative deviation still decays geometrically.",
         "zh": r"纯注意力堆叠在接近崩溃时是**双指数**收敛（每过一层，token 相对均值的偏离量"
               r"大致变成原来的三次方），而且要等偏离量足够小才成立；在分支不缩放的普通残差连接下，"
               r"秩虽然保留，相对偏离量仍按几何速度衰减。"},
    ),
    Claim(
        5, "Pre-LN gradients and warm-up",
        (Part(r"Pre-LN provides a constant gradient norm at initialisation,", "imprecise",
              r"depends on the setting: Xiong et al.'s theorem is about the last layer only; "
              r"NormFormer reports early layers' gradients much larger than later ones' in "
              r"Pre-LN pretraining, and in the book's small encoders they fall towards the "
              r"output."),
         Part(r"so it trains stably without warm-up.", "imprecise",
              r"in the reason: the gradient profile is not why (Adam's first step has the "
              r"same relative size in every layer); warm-up is usually explained by Post-LN's "
              r"amplification of parameter changes with depth or by Adam's noisy early "
              r"steps, and the book's rescues of failed Post-LN runs do not tell them apart.")),
        r"Xiong et al. bound the *last* layer's gradient: of order $d\sqrt{\ln d}$ for "
        r"Post-LN and $d\sqrt{\ln d/L}$ for Pre-LN. Whether the other layers' gradients "
        r"match depends on the setting; in the book's small encoders Pre-LN's fall towards "
        r"the output. Adam's first step has the same relative size everywhere; "
        r"Post-LN amplifies parameter changes with depth (Liu et al.), the usual "
        r"explanation of why it needs warm-up; that this amplification is what makes the "
        r"small runs fail is an inference, not measured.",
        r"Whether Pre-LN gradients are flat depends on the setting (in the book's encoders "
        r"they fall towards the output); the last layer's is bounded like $L^{-1/2}$; warm-up "
        r"is usually explained by amplification.",
        "04_prenorm_postnorm", ("def-variants",),
        {"en": r"Xiong et al. bound the last layer's gradient at initialisation: order "
               r"$d\sqrt{\ln d}$ for Post-LN whatever the depth, $d\sqrt{\ln d/L}$ for Pre-LN; "
               r"whether the other layers' gradients are flat depends on the setting (NormFormer "
               r"reports Pre-LN's early layers with much larger ones during pretraining); "
               r"warm-up is usually explained by Post-LN's amplification of updates with depth "
               r"(Liu et al.) or by "
               r"Adam's noisy early variance (RAdam).",
         "zh": r"Xiong 等人给出初始化时最后一层梯度的上界：Post-LN 为 $d\sqrt{\ln d}$ 量级，"
               r"与深度无关；Pre-LN 为 $d\sqrt{\ln d/L}$；其他各层的梯度是否平坦要看具体设置"
               r"（NormFormer 报告 Pre-LN 预训练时浅层的梯度比深层大得多）；"
               r"预热通常被解释为抵消 Post-LN 随深度放大参数更新的效应（Liu 等人），"
               r"或归因于 Adam 早期的方差估计不可靠（RAdam）。"},
    ),
    Claim(
        6, "Spectral normalisation",
        (Part(r"Spectral normalisation by power iteration constrains $\sigma_{\max}(W) \le 1$.",
              "false", r"small: the excess of $\|W/\hat\sigma\|_2$ over 1 shrinks "
              r"geometrically with the number of power steps, but it is never negative, and "
              r"zero only when the estimate is exact."),),
        r"Power iteration's estimate never exceeds $\sigma_1$, so "
        r"$\|W/\hat\sigma\|_2 = \sigma_1/\hat\sigma \ge 1$: the constraint is approached from "
        r"above. Its error falls like $(\sigma_2/\sigma_1)^{4k}$. Dividing by a certified upper "
        r"bound on $\sigma_1$ (such as $\|W\|_F$, $\sqrt{\|W\|_1\|W\|_\infty}$ or an SVD's) "
        r"does give $\le 1$.",
        r"$\|W/\hat\sigma\|_2 \ge 1$: the constraint is approached from above.",
        "05_spectral_normalisation", ("thm-lower-bound", "thm-rate"),
        {"en": r"Spectral normalisation gives $\|W/\hat\sigma\|_2 \ge 1$, not $\le 1$: "
               r"power iteration never overestimates $\sigma_1$.",
         "zh": r"谱归一化得到的是 $\|W/\hat\sigma\|_2 \ge 1$ 而非 $\le 1$："
               r"幂迭代的估计从不高于 $\sigma_1$。"},
    ),
    Claim(
        7, "The Lipschitz constant of self-attention",
        (Part(r"Self-attention satisfies $L_{\text{attn}} \le C\|W_V\|_2\bigl(1 + {}$"
              r" $\frac{2}{\sqrt d}\|W_Q\|_2\|W_K\|_2\|X\|_2\bigr)$.", "false",
              r"unbounded: on the two-sided input the exact constant exceeds it for every "
              r"$C$, by a factor that grows like $\|X\|_2$."),
         Part(r"Spectral normalisation together with $1/\sqrt d$ scaling is the *necessary and "
              r"sufficient* guarantee against gradient explosion and rank collapse in deep "
              r"Transformers.", "ill-posed",
              r"as worded it names no theorem, model or norm; read in the natural way, neither "
              r"half holds (deep Transformers train without it, and with it the logits stay "
              r"quadratic in $X$).")),
        r"Dot-product attention has no global Lipschitz constant; the worst case of its local "
        r"constant over a ball of radius $R$ grows like $R^2$, so no formula linear in "
        r"$\|X\|_2$ holds for any $C$. On tokens of norm $\le R$: "
        r"$L \le \|W_V\|_2(\min(\sqrt N, e^{aR^2}) + aR^2(1 + \min(\sqrt{N/2}, e^{aR^2})))$, "
        r"$a = \|W_QW_K^\top\|_2/\sqrt{d_k}$. For “necessary and sufficient” the card cites "
        r"no theorem; read in the natural way, it is neither necessary nor sufficient.",
        r"No global constant; the worst case over a ball of radius $R$ grows like $R^2$.",
        "06_attention_lipschitz", ("thm-t-squared", "thm-local-bound"),
        {"en": r"No formula linear in $\|X\|$ bounds attention's Lipschitz constant: the "
               r"worst case over a ball of radius $R$ grows like $R^2$. “Necessary and "
               r"sufficient” names no theorem, model or norm; read in the natural way it is "
               r"neither necessary (deep Transformers train without spectral normalisation) "
               r"nor sufficient (with it the logits are still quadratic in $X$).",
         "zh": r"任何关于 $\|X\|$ 线性的公式都界不住注意力的 Lipschitz 常数：半径为 $R$ 的"
               r"球上的最坏情形按 $R^2$ 增长。“充分必要”照字面没有指明定理、模型或范数；"
               r"按最自然的理解，它既不必要（不用谱归一化，深层 Transformer 也能训练），"
               r"也不充分（用了谱归一化，logits 仍是 $X$ 的二次函数）。"},
    ),
    Claim(
        8, "Depth, residual scaling and LayerNorm",
        (Part(r"Without Lipschitz control, tiny input errors diverge exponentially through "
              r"hundreds of layers.", "ill-posed",
              r"not measurable as worded (no model, norm or depth); the book's encoders show "
              r"no exponential growth up to 48 layers at initialisation, and the real layouts' "
              r"exact constants grow far more slowly than the product bound."),
         Part(r"The Lipschitz bound is the theoretical basis for residual scaling and "
              r"LayerNorm.", "imprecise",
              r"in the object: both are argued from signal propagation and the sensitivity "
              r"to parameter changes, not from an input-Lipschitz bound.")),
        r"A product of per-layer constants bounds the growth and can be exponentially loose; "
        r"at initialisation the book's Pre-LN and Post-LN encoders show no exponential "
        r"amplification up to 48 layers, and GPT-2- and Llama-layout stacks stay orders "
        r"of magnitude below the product bound. Residual scaling keeps each factor "
        r"$I + \alpha\,\partial f$ near 1, "
        r"and LayerNorm's Jacobian has norm $1/\sqrt{\operatorname{var} + \varepsilon}$, "
        r"globally $1/\sqrt\varepsilon$; both are argued from signal propagation, rank "
        r"collapse and the sensitivity to *parameter* changes, not from an input-Lipschitz bound.",
        r"The product bound is loose; measured constants grow far more slowly; LayerNorm "
        r"is $1/\sqrt\varepsilon$-Lipschitz.",
        "04_prenorm_postnorm", ("thm-ln-jacobian", "cor-ln-lipschitz"),
        {"en": r"A product of per-layer Lipschitz constants is a bound, not a rate: "
               r"at initialisation the measured constants grow far more slowly, and "
               r"LayerNorm is $1/\sqrt\varepsilon$-Lipschitz, not 1-Lipschitz; residual "
               r"scaling and LayerNorm rest on signal propagation and update sizes, not on an "
               r"input-Lipschitz bound.",
         "zh": r"逐层 Lipschitz 常数之积只是上界而非实际增长率：初始化时实测的常数增长远比它慢；"
               r"层归一化的全局常数是 $1/\sqrt\varepsilon$，而不是 1；残差缩放和层归一化的依据"
               r"是信号传播和更新的大小，而不是关于输入的 Lipschitz 上界。"},
    ),
)


#: The scale :data:`SCALE` in Chinese, for the Chinese edition.
_SCALE_ZH: dict[str, str] = {
    "true": "按原话即正确。",
    "true but loose": "界是对的，但有更紧的界可以取代它。",
    "imprecise": "大体上对，或在某些设置下对，但作为一般结论，在速率、条件或所讨论的对象上"
                 "有误。",
    "false": "按原话会被本页的一个反例推翻，且无论怎样理解这一说法都排除不了这个反例；"
             "偏差再小也算。",
    "ill-posed": "按原话，这不是一个能够证明或否证的命题。",
}

#: The card's claims in Chinese, part by part (``says``), and each claim's
#: ``size`` (per part), ``correct`` and ``short`` in Chinese, by claim number.
_ZH: dict[int, dict] = {
    1: {"says": (r"softmax 雅可比矩阵 $\diag(p) - pp^\top$ 的谱范数以 1 为上界。",),
        "size": (r"相差 2 倍：最优界是 $\frac12$。",),
        "correct": r"对每个 $z$ 都有 $\|J(z)\|_2 \le \frac12$；上确界 $\frac12$ 在 $n = 2$ 且"
                   r"两个 logit 相等时取到；$n \ge 3$ 时取不到，但当最大的两个 logit 并列、其余"
                   r"趋于 $-\infty$ 时可以任意逼近。",
        "short": r"$\|J\|_2 \le \frac12$，且 $\frac12$ 是最优的。"},
    2: {"says": (r"softmax 在 $\ell_\infty$ 下的 Lipschitz 常数恰好为 1，",
                 r"在 $\ell_2$ 下至多为 $\sqrt N$。"),
        "size": (r"相差 2 倍：对每个 $N$，常数都是 $\frac12$。",
                 r"相差 $2\sqrt N$ 倍：实际为 $\frac12$，卡片给的是 $\sqrt N$。"),
        "correct": r"对每个 $N$，$\ell_2$ 和 $\ell_\infty$ 下的最优常数都是 $\frac12$；"
                   r"带温度 $\tau$ 时为 $\frac{1}{2\tau}$。",
        "short": r"对每个 $N$，$\ell_2$ 和 $\ell_\infty$ 下都是 $\frac12$。"},
    3: {"says": (r"不做 $1/\sqrt d$ 缩放时，softmax 输入的方差随 $d$ 增长，",
                 r"因此雅可比矩阵迅速饱和、趋于 0（梯度消失）。"),
        "size": (r"没有偏差：方差恰好是 $d_k$。",
                 r"错在速率：$\mathbb E\|J\|_2$ 按 $1/\sigma$ 下降，而不是指数下降；$W_Q$ 的梯度"
                 r"只对典型的 query 消失，平均而言并不消失。"),
        "correct": r"$\Var(q \cdot k) = d_k$ 恰好成立。每个典型的 query 按其 logit 间隔指数级"
                   r"饱和，但平均而言只是多项式级的：$\mathbb E\|J\|_2 = \Theta(1/\sigma)$，约为 "
                   r"$d_k^{-1/2}$，这个平均值靠近似并列的 query 维持。logits 的梯度变小，"
                   r"大多数 query 收到的梯度也变小；少数近似并列的 query 得到很大的梯度，"
                   r"所以 $W_Q$ 的梯度平均仍保持在 1 的量级，并呈重尾分布。",
        "short": r"方差为 $d_k$；平均而言饱和速度为 $1/\sigma$，而非指数级；$W_Q$ 的梯度只对"
                 r"典型的 query 消失。"},
    4: {"says": (r"没有残差连接时，纯自注意力层的堆叠会使所有 token 向量指数收敛到同一个向量"
                 r"（秩崩溃）。",),
        "size": (r"错在速率（实际更快：接近崩溃后是双指数收敛）和条件（权重较大时，token 可以"
                 r"先在若干层内保持分开）。",),
        "correct": r"接近崩溃时，每过一层，偏离量大致变成原来的三次方，"
                   r"$\|\mathrm{res}\, f(X)\|_F \le c\,\|\mathrm{res}\, X\|_F^3$：一旦 "
                   r"$c\|\mathrm{res}\|_F^2 < 1$，收敛就是双指数级的。权重较大时，token 可以先在"
                   r"若干层内保持分开；普通残差连接只能把相对偏离量的衰减放慢为几何衰减。",
        "short": r"接近崩溃时双指数收敛（偏离量每层大致变为原来的三次方），且只在一定条件下"
                 r"成立。"},
    5: {"says": (r"Pre-LN 在初始化时能保证梯度范数恒定，", r"因此不用预热也能稳定训练。"),
        "size": (r"取决于设置：Xiong 等人的定理只涉及最后一层；NormFormer 报告 Pre-LN 预训练中"
                 r"浅层的梯度比深层大得多；在本书的小型编码器中，梯度则朝输出端递减。",
                 r"错在原因：关键不在梯度的逐层分布（Adam 第一步更新的相对大小在每一层都相同）；"
                 r"预热通常被解释为应对 Post-LN 随深度放大参数变化的效应，或 Adam 早期更新的"
                 r"噪声，而本书挽救失败的 Post-LN 训练的实验区分不了这两种解释。"),
        "correct": r"Xiong 等人给出的是**最后一层**梯度的上界：Post-LN 为 $d\sqrt{\ln d}$ 量级，"
                   r"Pre-LN 为 $d\sqrt{\ln d/L}$。其他各层的梯度是否与之相当要看具体设置；"
                   r"在本书的小型编码器中，Pre-LN 的梯度朝输出端递减。Adam 的第一步在各处的"
                   r"相对大小相同；Post-LN 随深度放大参数变化（Liu 等人），这是它需要预热的"
                   r"通常解释；至于本书小规模训练的失败正是这种放大造成的，这一点只是推断，"
                   r"并未测量。",
        "short": r"Pre-LN 的梯度是否平坦取决于设置（在本书的编码器中朝输出端递减）；其最后一层"
                 r"梯度的上界按 $L^{-1/2}$ 缩小；预热通常用放大效应解释。"},
    6: {"says": (r"用幂迭代做谱归一化，可以约束 $\sigma_{\max}(W) \le 1$。",),
        "size": (r"很小：$\|W/\hat\sigma\|_2$ 超出 1 的部分随幂迭代步数几何递减，但从不为负，"
                 r"只有估计精确时才为零。",),
        "correct": r"幂迭代的估计从不超过 $\sigma_1$，所以 "
                   r"$\|W/\hat\sigma\|_2 = \sigma_1/\hat\sigma \ge 1$：约束是从上方逼近的。误差按 "
                   r"$(\sigma_2/\sigma_1)^{4k}$ 下降。若除以 $\sigma_1$ 的一个有保证的上界（如 "
                   r"$\|W\|_F$、$\sqrt{\|W\|_1\|W\|_\infty}$ 或 SVD 给出的上界），就确实能得到 "
                   r"$\le 1$。",
        "short": r"$\|W/\hat\sigma\|_2 \ge 1$：约束是从上方逼近的。"},
    7: {"says": (r"自注意力满足 $L_{\text{attn}} \le C\|W_V\|_2\bigl(1 + {}$"
                 r" $\frac{2}{\sqrt d}\|W_Q\|_2\|W_K\|_2\|X\|_2\bigr)$。",
                 r"谱归一化加上 $1/\sqrt d$ 缩放，是深层 Transformer 避免梯度爆炸和秩崩溃的"
                 r"**充分必要**保证。"),
        "size": (r"无界：在对称输入上，对任何 $C$，精确常数都超过它，超出的倍数按 "
                 r"$\|X\|_2$ 增长。",
                 r"按原话，它没有指明定理、模型或范数；按最自然的理解，必要性和充分性都不成立"
                 r"（不用它，深层 Transformer 照样能训练；用了它，logits 仍是 $X$ 的二次函数）。"),
        "correct": r"点积注意力没有全局 Lipschitz 常数；它的局部常数在半径为 $R$ 的球上的最坏"
                   r"情形按 $R^2$ 增长，所以对任何 $C$，关于 $\|X\|_2$ 线性的公式都不成立。在范数 "
                   r"$\le R$ 的 token 上："
                   r"$L \le \|W_V\|_2(\min(\sqrt N, e^{aR^2}) + aR^2(1 + \min(\sqrt{N/2}, "
                   r"e^{aR^2})))$，其中 $a = \|W_QW_K^\top\|_2/\sqrt{d_k}$。至于“充分必要”，"
                   r"卡片没有引用任何定理；按最自然的理解，它既不必要也不充分。",
        "short": r"没有全局常数；半径为 $R$ 的球上的最坏情形按 $R^2$ 增长。"},
    8: {"says": (r"没有 Lipschitz 控制时，微小的输入误差经过数百层后会指数级发散。",
                 r"Lipschitz 上界是残差缩放和层归一化的理论基础。"),
        "size": (r"按原话无法测量（没有指明模型、范数或深度）；本书的编码器在初始化时直到 48 层"
                 r"都没有出现指数增长，真实模型结构的精确常数也比乘积上界增长得慢得多。",
                 r"错在对象：两者的依据是信号传播和对参数变化的敏感度，而不是关于输入的 "
                 r"Lipschitz 上界。"),
        "correct": r"逐层常数之积是增长的上界，可能松到指数级；初始化时，本书的 Pre-LN 和 "
                   r"Post-LN 编码器直到 48 层都没有指数级放大，GPT-2 和 Llama 结构的堆叠也比"
                   r"乘积上界低几个数量级。残差缩放让每个因子 $I + \alpha\,\partial f$ 保持在 1 "
                   r"附近，层归一化的雅可比矩阵范数为 $1/\sqrt{\operatorname{var} + \varepsilon}$，"
                   r"全局常数为 $1/\sqrt\varepsilon$；两者的依据都是信号传播、秩崩溃和对**参数**"
                   r"变化的敏感度，而不是关于输入的 Lipschitz 上界。",
        "short": r"乘积上界很松；实测常数增长慢得多；层归一化是 $1/\sqrt\varepsilon$-Lipschitz "
                 r"的。"},
}


def _check_zh() -> None:
    """Every claim of :data:`CLAIMS` has its Chinese texts, one per part."""
    for c in CLAIMS:
        zh = _ZH.get(c.number)
        if zh is None or any(len(zh[k]) != len(c.parts) for k in ("says", "size")):
            raise ValueError(f"claim {c.number}: the Chinese texts must have one 'says' and "
                             f"one 'size' per part")


_check_zh()


def _lang(lang: str) -> str:
    return as_choice(lang, "lang", tuple(_VERDICT_WORDS))


def claim(number: int) -> Claim:
    """The claim with this number (1 to 8)."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise TypeError(f"number must be an int; got {type(number).__name__}")
    for c in CLAIMS:
        if c.number == number:
            return c
    raise ValueError(f"number must be one of {[c.number for c in CLAIMS]}; got {number}")


def section_label(number: int) -> str:
    """The MyST label of a claim's section on the audit page."""
    return f"audit-claim-{claim(number).number}"


def _settled_by(c: Claim, short: bool = False, lang: str = "en") -> str:
    zh = lang == "zh"
    refs = ("、" if zh else ", ").join(f"{{prf:ref}}`{r}`" for r in c.refs)
    n = int(c.chapter[:2])
    text = (f"第 {n} 章 <{c.chapter}>" if zh else f"Ch. {n} <{c.chapter}>") if short \
        else c.chapter
    link = f"{{doc}}`{text}`"
    if not refs:
        return link
    if zh and not short:  # "依据：《…》（定理 …）", not two colons in one line
        return f"{link}（{refs}）"
    return f"{link}{'：' if zh else ': '}{refs}"


def _numbered(texts: tuple[str, ...], lang: str) -> str:
    """One text as it is; several numbered (1), (2) (full-width in Chinese)."""
    if len(texts) == 1:
        return texts[0]
    if lang == "zh":
        return "".join(f"（{i}）{t}" for i, t in enumerate(texts, 1))
    return " ".join(f"({i}) {t}" for i, t in enumerate(texts, 1))


def _says(c: Claim, lang: str = "en") -> str:
    if lang == "zh":
        return _numbered(_ZH[c.number]["says"], lang)
    return _numbered(tuple(p.says for p in c.parts), lang)


def _verdict_words(c: Claim, lang: str = "en") -> str:
    words = _VERDICT_WORDS[lang]
    if len(c.parts) == 1:
        return f"**{words[c.parts[0].verdict]}**"
    if lang == "zh":
        return "；".join(f"（{i}）**{words[p.verdict]}**" for i, p in enumerate(c.parts, 1))
    return "; ".join(f"**{words[p.verdict]}** ({i})" for i, p in enumerate(c.parts, 1))


def _check_claims(claims: tuple[Claim, ...]) -> None:
    if not isinstance(claims, (tuple, list)) or not claims or not all(
            isinstance(c, Claim) for c in claims):
        raise TypeError(f"claims must be a non-empty sequence of Claim; "
                        f"got {type(claims).__name__}")


def verdict_table(claims: tuple[Claim, ...] = CLAIMS, lang: str = "en") -> str:
    """The audit's table, one row per claim (a MyST ``list-table``).

    Columns: what the card says (led by the claim's number, a link to its
    section), the verdict, and the correct statement in short with the
    chapter and theorems that settle it. A claim with several parts numbers
    them in the claim and in the verdict. ``lang``: ``"en"`` or ``"zh"``
    (the Chinese edition's table, from the same claims and verdicts).
    """
    _check_claims(claims)
    lang = _lang(lang)
    head = (("卡片原话", "判定", "正确说法及证明出处") if lang == "zh" else
            ("The card says", "Verdict", "The truth, and where it is proved"))
    rows = ["```{list-table}", ":header-rows: 1", ":widths: 50 16 34", "",
            f"* - {head[0]}", f"  - {head[1]}", f"  - {head[2]}"]
    for c in claims:
        link = f"**{{ref}}`{c.number} <{section_label(c.number)}>`**"
        settled = _settled_by(c, short=True, lang=lang)
        short = (f"{_ZH[c.number]['short']}（{settled}）" if lang == "zh"
                 else f"{c.short} ({settled})")
        rows += [f"* - {link} {_says(c, lang)}", f"  - {_verdict_words(c, lang)}",
                 f"  - {short}"]
    return "\n".join([*rows, "```"])


def _sizes(c: Claim, lang: str = "en") -> str:
    if lang == "zh":
        return _numbered(_ZH[c.number]["size"], lang)
    return _numbered(tuple(p.size for p in c.parts), lang)


def claim_box(number: int, lang: str = "en") -> str:
    """The head of a claim's section: the card's words, the verdict, the size of
    the discrepancy, the correct statement and where it is proved (MyST Markdown).
    ``lang``: ``"en"`` or ``"zh"`` (the Chinese edition's box)."""
    c = claim(number)
    if _lang(lang) == "zh":
        return (f"> **卡片原话**：{_says(c, lang)}\n>\n"
                f"> **判定**：{_verdict_words(c, lang)}。\n>\n"
                f"> **偏差多大**：{_sizes(c, lang)}\n>\n"
                f"> **正确说法**：{_ZH[c.number]['correct']}\n>\n"
                f"> **依据**：{_settled_by(c, lang=lang)}。")
    return (f"> **The card:** {_says(c)}\n>\n"
            f"> **Verdict:** {_verdict_words(c)}.\n>\n"
            f"> **How large:** {_sizes(c)}\n>\n"
            f"> **Correct statement:** {c.correct}\n>\n"
            f"> **Settled in** {_settled_by(c)}.")


def scale_list(lang: str = "en") -> str:
    """The verdict scale :data:`SCALE` as a MyST bullet list, best to worst.
    ``lang``: ``"en"`` or ``"zh"`` (the verdict words and the scale in Chinese)."""
    if _lang(lang) == "zh":
        words = _VERDICT_WORDS["zh"]
        return "\n".join(f"- **{words[v]}**：{_SCALE_ZH[v]}" for v in VERDICTS)
    return "\n".join(f"- **{v}**: {SCALE[v]}" for v in VERDICTS)


def traps(lang: str = "en", claims: tuple[Claim, ...] = CLAIMS) -> str:
    """The review sheets' list of traps, one line per claim (MyST Markdown).

    Each line quotes the card, numbering its parts where they get different
    verdicts, gives each part's verdict, then the trap in one sentence and a
    link to the claim's section of the audit. The Chinese line quotes the
    card in Chinese and uses full-width punctuation.

    Parameters
    ----------
    lang : {"en", "zh"}
    claims : tuple of Claim, default :data:`CLAIMS`
    """
    if lang not in _VERDICT_WORDS:
        raise ValueError(f"lang must be one of {sorted(_VERDICT_WORDS)}; got {lang!r}")
    _check_claims(claims)
    words = _VERDICT_WORDS[lang]
    lines = []
    for c in claims:
        link = section_label(c.number)
        if lang == "en":
            says = " ".join(f"({i}) {p.says}" if len(c.parts) > 1 else p.says
                            for i, p in enumerate(c.parts, 1))
            verdict = _verdict_words(c, lang)
            lines.append(f"{c.number}. The card: “{says}” Verdict: {verdict}. "
                         f"{c.trap['en']} ({{ref}}`→ <{link}>`)")
        else:
            parts = _ZH[c.number]["says"]
            if len(parts) != len(c.parts):
                raise ValueError(f"claim {c.number}: the Chinese card has {len(parts)} parts, "
                                 f"the claim {len(c.parts)}")
            if len(parts) == 1:
                says, verdict = parts[0], f"**{words[c.parts[0].verdict]}**"
            else:
                says = "".join(f"（{i}）{s}" for i, s in enumerate(parts, 1))
                verdict = "；".join(f"（{i}）**{words[p.verdict]}**"
                                   for i, p in enumerate(c.parts, 1))
            lines.append(f"{c.number}. 卡片：“{says}”判定：{verdict}。"
                         f"{c.trap['zh']}（{{ref}}`证据 <{link}>`）")
    return "\n".join(lines)


def interview_answer(chapter: str | Path, lang: str = "en",
                     parts: tuple[str, ...] = interview.PARTS) -> str:
    """A chapter's interview answer in one language, as MyST Markdown.

    The answers live in one bilingual source per chapter
    (``chapters/interview/<chapter>.yml``); this renders one of them with
    :func:`lipattn.book.interview.answer`, so the chapter's own section and both
    review sheets show the same text.

    Parameters
    ----------
    chapter : str or Path
        The chapter, e.g. ``"01_softmax_jacobian"`` or its ``.md`` file.
    lang : {"en", "zh"}
    parts : tuple of str, default all of :data:`lipattn.book.interview.PARTS`

    Returns
    -------
    str
        The spoken answer, the five points, the whiteboard line, the
        follow-ups and the names, each led by a bold label.
    """
    if isinstance(chapter, Path):
        chapter = chapter.stem
    if lang not in _VERDICT_WORDS:
        raise ValueError(f"lang must be one of {sorted(_VERDICT_WORDS)}; got {lang!r}")
    return interview.answer(chapter, lang, parts)
