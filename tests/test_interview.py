"""The interview answers (lipattn/book/interview.py and chapters/interview/*.yml)."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import yaml
from markdown_it import MarkdownIt

from lipattn.book import interview as iv

CJK = re.compile(r"[\u4e00-\u9fff]")
MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`", re.S)


def _zh_texts():
    """Every Chinese text of every answer, with its location."""
    for stem in iv.CHAPTERS:
        for where, field in iv._bilingual_fields(iv.load(stem)):
            texts = field["zh"] if isinstance(field["zh"], list) else [field["zh"]]
            for t in texts:
                yield f"{stem}: {where}", t


def test_every_chapter_has_a_complete_answer_in_both_languages():
    for stem in iv.CHAPTERS:
        data = iv.load(stem)
        assert len(data["points"]["en"]) == len(data["points"]["zh"]) == 5
        assert data["follow_ups"] and data["names"], stem
        words = len(data["spoken"]["en"].split())
        assert 60 <= words <= 90, f"{stem}: the spoken answer has {words} words"
        chars = len(CJK.findall(data["spoken"]["zh"]))
        assert 100 <= chars <= 200, f"{stem}: the Chinese spoken answer has {chars} characters"
        for where, field in iv._bilingual_fields(data):
            zh = field["zh"] if isinstance(field["zh"], str) else " ".join(field["zh"])
            assert CJK.search(zh), f"{stem}: {where} has no Chinese"


def test_the_chinese_is_up_to_date_with_the_english():
    """The staleness check: each Chinese text records the hash of the English
    it was translated from. Changing the English fails this test until the
    Chinese is updated and its zh_from set to the new hash."""
    stale = [s for stem in iv.CHAPTERS for s in iv.stale_fields(stem)]
    assert not stale, "\n".join(stale)


def test_the_staleness_check_can_fail(tmp_path):
    for stem in iv.CHAPTERS:
        shutil.copy(iv.FOLDER / f"{stem}.yml", tmp_path)
    stem = iv.CHAPTERS[2]
    path = tmp_path / f"{stem}.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert iv.stale_fields(stem, tmp_path) == []
    data["points"]["en"][3] += " Changed."
    data["follow_ups"][0]["a"].pop("zh")
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    stale = iv.stale_fields(stem, tmp_path)
    assert len(stale) == 2
    assert "points: the English changed" in stale[0]
    assert iv.en_hash(data["points"]["en"]) in stale[0]
    assert "follow_ups[0].a needs both" in stale[1]


def test_en_hash_is_the_sha256_of_the_text():
    import hashlib

    assert iv.en_hash(" ab \n") == hashlib.sha256(b"ab").hexdigest()[:12]
    assert iv.en_hash(["a", "b"]) == hashlib.sha256(b"a\nb").hexdigest()[:12]
    with pytest.raises(TypeError, match="text must be"):
        iv.en_hash(3)


def _tokens(markdown: str):
    return MarkdownIt("commonmark").parse(markdown)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_rendered_answer_has_the_spoken_version_first_and_a_real_list(lang):
    for stem in iv.CHAPTERS:
        data = iv.load(stem)
        text = iv.answer(stem, lang)
        assert text.startswith(f"**{iv._LABELS[lang]['spoken']}**")
        assert data["spoken"][lang].strip() in text.split("\n\n")[0]
        toks = _tokens(text)
        ordered = [t for t in toks if t.type == "ordered_list_open"]
        assert len(ordered) == 1
        items = [t for t in toks if t.type == "list_item_open" and t.level == 1]
        n_bullets = len(data["follow_ups"]) + len(data["names"])
        assert len(items) == 5 + n_bullets, stem
        assert f"$$\n{data['whiteboard']}\n$$" in text
        order = [text.index(f"**{iv._LABELS[lang][p]}**") for p in iv.PARTS]
        assert order == sorted(order)
    only = iv.answer(iv.CHAPTERS[0], lang, parts=("spoken",))
    assert "\n\n" not in only


def test_chinese_typography():
    """Full-width punctuation next to Chinese, nothing after a full-width
    colon, no italics on Chinese, no pointers a candidate cannot say, and
    残差 only in 残差连接 and 残差流 (res X is 偏离量)."""
    for where, text in _zh_texts():
        prose = MATH.sub("M", text)
        assert not re.search(r"[\u4e00-\u9fff][,;:()!?]|[,;:()!?][\u4e00-\u9fff]", prose), \
            (where, text)
        assert not re.search(r"[：；，。] ", prose), (where, text)
        assert not re.search(r"\*[^*]*[\u4e00-\u9fff][^*]*\*(?!\*)", prose.replace("**", "")), \
            where
        assert not re.search(r"本章|这里|我们的|第 ?\d ?章|详见", prose), (where, text)
        assert not re.search(r"残差(?!连接|流)", prose), (where, text)
    zh = iv.answer(iv.CHAPTERS[0], "zh")
    assert zh.startswith("**一分钟回答**：") and "：** " not in zh and "** " not in zh


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_bold_run_closes(lang):
    """CommonMark closes ``**`` only when it is right-flanking: a Chinese
    label or question ending in full-width punctuation and followed by a
    Chinese character would print its asterisks. Parse the rendered answers
    and check that no ``*`` is left in the text."""
    from conftest import ROOT

    from lipattn.book import audit

    sheet = "review_zh" if lang == "zh" else "review"
    texts = {stem: iv.answer(stem, lang) for stem in iv.CHAPTERS}
    texts["traps"] = audit.traps(lang)
    texts[sheet] = (ROOT / "chapters" / f"{sheet}.md").read_text(encoding="utf-8")
    for stem, text in texts.items():
        tokens = _tokens(text)
        for tok in tokens:
            for child in tok.children or []:
                if child.type == "text":
                    assert "*" not in MATH.sub("M", child.content), (stem, child.content)


def test_english_has_no_pointers_a_candidate_cannot_say():
    for stem in iv.CHAPTERS:
        text = iv.answer(stem, "en")
        assert not re.search(r"this chapter|the chapter|our experiment|next chapter|Chapter \d",
                             text, re.I), stem


def test_cited_names_are_the_checked_ones():
    """The names interviewers quote, each with its venue."""
    names = " ".join(n["en"] for stem in iv.CHAPTERS for n in iv.load(stem)["names"])
    for needle in ("Dong, Cordonnier & Loukas (ICML 2021)", "Liu et al. (EMNLP 2020)",
                   "Liu et al. (ICLR 2020)", "RAdam", "Admin", "NormFormer", "DeepNorm",
                   "token uniformity", "over-smoothing"):
        assert needle in names, needle
    assert "过平滑" in " ".join(n["zh"] for n in iv.load("03_rank_collapse")["names"])


def test_q5_states_the_implementation_mechanism():
    points = " ".join(iv.load("05_spectral_normalisation")["points"]["en"])
    for needle in ("buffer", "one power step", "eval mode does not update",
                   r"(G - \langle G, W_{\mathrm{SN}}\rangle\,uv^\top)/\hat\sigma",
                   r"\hat\sigma = \|Wv\| \le \sigma_1", r"\ge 1"):
        assert needle in points, needle


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="chapter must be one of"):
        iv.load("07_nothing")
    with pytest.raises(TypeError, match="chapter must be a string"):
        iv.answer(1)
    with pytest.raises(ValueError, match="lang must be one of"):
        iv.answer(iv.CHAPTERS[0], "fr")
    with pytest.raises(ValueError, match="parts must be"):
        iv.answer(iv.CHAPTERS[0], parts=("abstract",))
    with pytest.raises(ValueError, match="folder must hold .* answer file"):
        iv.load(iv.CHAPTERS[0], tmp_path)
    with pytest.raises(TypeError, match="folder must be a str or Path"):
        iv.load(iv.CHAPTERS[0], 1.5)
    for parts in (None, 1.5, "spoken"):
        with pytest.raises(ValueError, match="parts must be"):
            iv.answer(iv.CHAPTERS[0], parts=parts)
    (tmp_path / f"{iv.CHAPTERS[0]}.yml").write_text("spoken: {en: a, zh: b}\n")
    with pytest.raises(ValueError, match="missing parts"):
        iv.load(iv.CHAPTERS[0], tmp_path)
    assert iv.load(f"{iv.CHAPTERS[1]}.md") == iv.load(iv.CHAPTERS[1])


def test_every_search_term_is_on_the_chinese_sheet():
    """Each term of the Chinese search dictionary (the card's terms) appears
    in what the Chinese review sheet shows: its own text, the rendered
    answers, the traps and the quiz, so a site search for it finds the sheet
    (tests/test_browser.py searches the built site)."""
    from conftest import ROOT

    from lipattn.book import audit
    from lipattn.book.quiz import Quiz

    page = (ROOT / "chapters" / "review_zh.md").read_text(encoding="utf-8")
    picks = eval(re.search(r"^picks = (\[.*?\])", page, re.M).group(1))
    shown = [page, audit.traps("zh")]
    shown += [iv.question(s, "zh") + iv.answer(s, "zh") for s in iv.CHAPTERS]
    shown += [Quiz.from_yaml(ROOT / "chapters" / "quizzes" / f"{s}.yml", lang="zh",
                             select=[k])._repr_html_()
              for s, k in zip(iv.CHAPTERS, picks, strict=True)]
    shown = "\n".join(shown)
    terms = [line.split()[0] for line in
             (ROOT / "lib" / "lipattn" / "book" / "search_terms_zh.txt").read_text(encoding="utf-8")
             .splitlines() if line.strip()]
    assert len(terms) >= 20
    missing = [t for t in terms if t not in shown]
    assert not missing, missing
    # and the site's indexer makes each of them a search term of the sheet:
    # Sphinx's Chinese splitter is jieba's cut_for_search with this dictionary
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    with open(ROOT / "lib" / "lipattn" / "book" / "search_terms_zh.txt", "rb") as f:
        tokenizer.load_userdict(f)
    words = set(tokenizer.cut_for_search(MATH.sub(" ", shown)))
    assert not [t for t in terms if t not in words]
    assert "跳连" not in words  # control: the dropped synonym is nowhere on the sheet
    assert not re.search(r"残差(?!连接|流|缩放|”)", MATH.sub("M", shown))


# --- The mathematical facts the answers state, checked independently -------------------
# Each is computed here from its definition (numpy, finite differences), not with lipattn.

def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _jac(p):
    return np.diag(p) - np.outer(p, p)


def test_softmax_jacobian_eigenvalues_interlace_and_solve_the_secular_equation():
    """Ch1 follow-up: 0 on the all-ones vector; the others interlace the sorted
    probabilities and solve sum p_i^2/(p_i - lam) = 1; all 1/n at uniform p;
    lam_max <= p_max, with equality when the top probability is tied."""
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 9):
        for _ in range(100):
            p = _softmax(rng.normal(size=n) * rng.uniform(0.1, 5))
            lam, vec = np.linalg.eigh(_jac(p))
            ps = np.sort(p)
            assert abs(lam[0]) < 1e-13 and np.allclose(np.abs(vec[:, 0]), n ** -0.5)
            assert np.all(ps[:-1] - 1e-13 <= lam[1:]) and np.all(lam[1:] <= ps[1:] + 1e-13)
            for mu in lam[1:]:
                if np.min(np.abs(p - mu)) > 1e-8:
                    assert abs(np.sum(p ** 2 / (p - mu)) - 1) < 1e-6
        assert np.allclose(np.linalg.eigvalsh(_jac(np.full(n, 1 / n)))[1:], 1 / n)


def test_k_tied_top_logits_give_the_tied_probability_tending_to_one_over_k():
    """Ch1 follow-up and quiz 01 q4: with k >= 2 logits tied at the top the norm
    equals the tied probability at every scale and tends to 1/k (not 1/2)."""
    for n in (3, 6):
        for k in range(2, n + 1):
            for gap in (0.0, 1.0, 5.0, 40.0):
                z = np.zeros(n)
                z[k:] = -gap
                p = _softmax(z)
                assert abs(np.linalg.norm(_jac(p), 2) - p.max()) < 1e-12
            assert abs(np.linalg.norm(_jac(p), 2) - 1 / k) < 1e-12


def test_softmax_is_the_gradient_of_lse_and_cross_entropy_gives_p_minus_y():
    rng = np.random.default_rng(1)
    z, h, eye = rng.normal(size=6), 1e-5, np.eye(6)

    def lse(v):
        return np.log(np.exp(v - v.max()).sum()) + v.max()

    grad = np.array([(lse(z + h * e) - lse(z - h * e)) / (2 * h) for e in eye])
    hess = np.array([(_softmax(z + h * e) - _softmax(z - h * e)) / (2 * h) for e in eye])
    assert np.allclose(grad, _softmax(z), atol=1e-9)
    assert np.allclose(hess, _jac(_softmax(z)), atol=1e-9)

    def ce(v):
        return -np.log(_softmax(v)[2])

    assert np.allclose([(ce(z + h * e) - ce(z - h * e)) / (2 * h) for e in eye],
                       _softmax(z) - eye[2], atol=1e-9)


@pytest.mark.parametrize("centre", [False, True])
def test_rmsnorm_and_layernorm_jacobian_norms(centre):
    """Ch4 follow-up: RMSNorm's Jacobian has norm 1/sqrt(ms + eps) (LayerNorm's,
    1/sqrt(var + eps)), so both reach 1/sqrt(eps): RMSNorm only at 0."""
    eps, rng = 1e-5, np.random.default_rng(2)

    def norm(x):
        c = x - x.mean() if centre else x
        return c / np.sqrt(np.mean(c ** 2) + eps)

    for scale in (1e-3, 1e-1, 1.0, 10.0):
        x = rng.normal(size=7) * scale
        stat = np.var(x) if centre else np.mean(x ** 2)
        h = 1e-6 * scale
        jac = np.array([(norm(x + h * e) - norm(x - h * e)) / (2 * h) for e in np.eye(7)]).T
        assert abs(np.linalg.norm(jac, 2) * np.sqrt(stat + eps) - 1) < 1e-5


def test_the_residual_bound_is_not_a_certificate_but_frobenius_and_schur_are():
    """Ch5: sigma_hat + |r|/sqrt2 bounds the singular value found, not sigma_1."""
    w = np.diag([1.0, 0.9])
    v = np.array([0.0, 1.0])  # a start with no component on the top vector
    u = w @ v / np.linalg.norm(w @ v)
    s = u @ w @ v
    assert s + np.linalg.norm(w.T @ u - s * v) / np.sqrt(2) < np.linalg.norm(w, 2)
    rng = np.random.default_rng(3)
    for _ in range(200):
        a = rng.normal(size=rng.integers(2, 8, size=2))
        top = np.linalg.norm(a, 2)
        assert np.linalg.norm(a) >= top - 1e-12
        assert np.sqrt(np.abs(a).sum(0).max() * np.abs(a).sum(1).max()) >= top - 1e-12


def test_l2_attention_with_only_the_keys_tied_is_not_lipschitz():
    """Ch6 follow-up and quiz 06 q4: with W_K = W_Q but untied values X W_V, tokens
    spread along the kernel of W_Q make the local constant grow without bound."""
    wq, wv = np.array([[1.0], [0.0]]), np.eye(2)

    def l2(x):
        q = x @ wq
        s = -((q[:, None, :] - q[None, :, :]) ** 2).sum(-1)
        p = np.exp(s - s.max(1, keepdims=True))
        return (p / p.sum(1, keepdims=True)) @ x @ wv

    consts = []
    for t in (1.0, 10.0, 100.0):
        x0 = np.array([[0.0, 0.0], [0.5, t], [-0.5, -t]]).ravel()
        jac = np.array([(l2((x0 + 1e-6 * e).reshape(3, 2)) - l2((x0 - 1e-6 * e).reshape(3, 2)))
                        .ravel() / 2e-6 for e in np.eye(6)]).T
        consts.append(np.linalg.norm(jac, 2))
    assert consts[2] > 5 * consts[1] > 25 * consts[0]


def test_over_smoothing_by_a_fixed_random_walk_is_geometric_at_its_second_eigenvalue():
    """Ch3 follow-up: repeated averaging by one row-stochastic matrix shrinks the
    deviation from consensus like |lambda_2|^L (a GNN's over-smoothing)."""
    rng = np.random.default_rng(4)
    a = rng.uniform(size=(6, 6))
    a = a + a.T
    walk = a / a.sum(1, keepdims=True)  # reversible, so its spectrum is real
    lam2 = np.sort(np.abs(np.linalg.eigvals(walk)))[-2]
    x, devs = rng.normal(size=(6, 3)), []
    pi = np.linalg.matrix_power(walk, 200)[0]  # stationary distribution
    for _ in range(14):
        x = walk @ x
        devs.append(np.linalg.norm(x - pi @ x))
    assert abs((devs[-1] / devs[-6]) ** (1 / 5) / lam2 - 1) < 0.02


def test_folding_the_scale_into_w_q_changes_the_update_of_the_logits():
    """Ch2 follow-up: W_Q / sqrt(d) gives the same logits, but one SGD step moves
    them d times further and one sign (Adam-like) step sqrt(d) times further."""
    rng = np.random.default_rng(5)
    d, x, wk = 16, rng.normal(size=(4, 16)), rng.normal(size=(16, 16)) / 4
    wq, g_s = rng.normal(size=(16, 16)) / 4, rng.normal(size=(4, 4))

    def logits(w, c):
        return c * x @ w @ wk.T @ x.T

    grad_a = x.T @ g_s @ x @ wk / np.sqrt(d)  # d<g_s, logits>/dW_Q with c = 1/sqrt(d)
    grad_b = x.T @ g_s @ x @ wk               # with c = 1 and W_Q' = W_Q / sqrt(d)
    assert np.allclose(logits(wq, d ** -0.5), logits(wq / np.sqrt(d), 1.0))
    da = logits(wq - 1e-3 * grad_a, d ** -0.5) - logits(wq, d ** -0.5)
    db = logits(wq / np.sqrt(d) - 1e-3 * grad_b, 1.0) - logits(wq / np.sqrt(d), 1.0)
    assert np.allclose(db, d * da)
    da = logits(wq - 1e-3 * np.sign(grad_a), d ** -0.5) - logits(wq, d ** -0.5)
    db = logits(wq / np.sqrt(d) - 1e-3 * np.sign(grad_b), 1.0) - logits(wq / np.sqrt(d), 1.0)
    assert np.allclose(db, np.sqrt(d) * da)


def test_gcn_normalised_adjacency_is_symmetric_and_contracts_at_s_times_lambda():
    """Ch3 follow-up: GCN's D^-1/2 (A + I) D^-1/2 is symmetric, not row-stochastic;
    its top eigenvector is sqrt(degree), and with ReLU the distance to that
    eigenspace shrinks by at most s * |lambda_2| per layer (Oono & Suzuki)."""
    rng = np.random.default_rng(6)
    adj = np.triu((rng.uniform(size=(7, 7)) < 0.5).astype(float), 1)
    adj = adj + adj.T + np.eye(7)
    adj[np.arange(6), np.arange(1, 7)] = adj[np.arange(1, 7), np.arange(6)] = 1.0  # connected
    deg = adj.sum(1)
    a_hat = adj / np.sqrt(np.outer(deg, deg))
    assert np.allclose(a_hat, a_hat.T) and not np.allclose(a_hat.sum(1), 1.0)
    lam, vec = np.linalg.eigh(a_hat)
    assert abs(lam[-1] - 1) < 1e-12
    assert np.allclose(np.abs(vec[:, -1]), np.sqrt(deg / deg.sum()))
    lam2, e = max(abs(lam[0]), abs(lam[-2])), np.sqrt(deg / deg.sum())

    def dist(x):  # distance to span(e) (x) R^c
        return np.linalg.norm(x - np.outer(e, e @ x))

    x = rng.normal(size=(7, 4))
    for _ in range(6):
        w = rng.normal(size=(4, 4))
        s = np.linalg.norm(w, 2)
        new = np.maximum(a_hat @ x @ w, 0.0)
        assert dist(new) <= s * lam2 * dist(x) * (1 + 1e-12)
        x = new / s


def test_products_with_w_cannot_certify_an_upper_bound():
    """Ch5 follow-up: W + c a b^T, with b orthogonal to every vector W was applied
    to and a to every vector W^T was applied to, answers every probe alike while
    its top singular value grows without bound."""
    rng = np.random.default_rng(7)
    w, vs, us = rng.normal(size=(6, 5)), rng.normal(size=(5, 4)), rng.normal(size=(6, 4))
    b = np.linalg.svd(vs.T)[2][-1]  # orthogonal to the 4 probes of W
    a = np.linalg.svd(us.T)[2][-1]  # orthogonal to the 4 probes of W^T
    for c in (10.0, 1e3):
        w2 = w + c * np.outer(a, b)
        assert np.allclose(w2 @ vs, w @ vs) and np.allclose(w2.T @ us, w.T @ us)
        assert np.linalg.norm(w2, 2) >= c - np.linalg.norm(w, 2)
