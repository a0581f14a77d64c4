"""Label-smoothed cross-entropy over the target vocabulary, padding ignored, and R-Drop's
two-pass loss; on the CPU fused with the output projection, chunk by chunk
(:func:`projected_label_smoothed_nll`, :func:`projected_rdrop_loss`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.model.shape_buckets import padded_rows

__all__ = [
    "LossOutput",
    "label_smoothed_nll",
    "projected_label_smoothed_nll",
    "projected_rdrop_loss",
    "rdrop_loss",
    "target_log_probs",
]


@dataclass
class LossOutput:
    """Sums over the non-padding target tokens of one batch.

    Attributes:
        loss: label-smoothed loss summed over tokens (what is minimised, after dividing
            by ``n_tokens``).
        nll: plain negative log-likelihood summed over tokens (perplexity = exp(nll / n)).
        n_tokens: number of non-padding target tokens.
    """

    loss: Tensor
    nll: Tensor
    n_tokens: int


def label_smoothed_nll(
    logits: Tensor, target: Tensor, *, epsilon: float, ignore_index: int
) -> LossOutput:
    """Label-smoothed cross-entropy: (1 - eps) * nll + eps * mean over V of -log p.

    This is the smoothing of ``F.cross_entropy(label_smoothing=eps)``: eps/V of the mass on
    every class, the gold one included.

    Args:
        logits: (N, V) or (B, T, V) unnormalised scores.
        target: (N,) or (B, T) gold ids; ``ignore_index`` positions contribute nothing.
        epsilon: smoothing in [0, 1).
        ignore_index: the padding id.
    """
    logits = logits.reshape(-1, logits.size(-1))
    target = target.reshape(-1)
    keep = target.ne(ignore_index)
    if not bool(keep.all()):
        logits, target = logits[keep], target[keep]
    loss, nll = _SmoothedNLL.apply(logits, target, epsilon)
    return LossOutput(loss=loss.sum(), nll=nll.sum(), n_tokens=int(target.numel()))


def rdrop_loss(
    logits1: Tensor,
    logits2: Tensor,
    target: Tensor,
    *,
    epsilon: float,
    alpha: float,
    ignore_index: int,
) -> LossOutput:
    """R-Drop (Liang et al., 2021): two dropout passes over one batch, pulled together.

    With ``CE_k`` the label-smoothed loss of pass k (:func:`label_smoothed_nll`) summed over
    the N non-padding target tokens, and ``p_k,t`` pass k's distribution over the vocabulary
    at token t::

        loss = 1/2 * (CE_1 + CE_2)
               + alpha/2 * sum_t 1/2 * (KL(p_1,t || p_2,t) + KL(p_2,t || p_1,t))

    which is the paper's loss (its eq. 3: ``L = NLL_1 + NLL_2 + alpha * 1/2 (KL + KL)``)
    summed over tokens and halved: the cross-entropy term is the mean of the two passes, so
    the loss stays on the scale of a run without R-Drop, and ``alpha`` means what it means in
    the paper (the authors' fairseq code normalizes the same way: its batch holds every
    sentence twice, and it divides by that doubled token count). The caller divides by N.

    Args:
        logits1: (N, V) or (B, T, V) scores of the first pass.
        logits2: the second pass' scores, same shape.
        target: (N,) or (B, T) gold ids; ``ignore_index`` positions contribute nothing.
        epsilon: label smoothing in [0, 1).
        alpha: weight of the KL term (0: the mean of the two passes' losses).
        ignore_index: the padding id.

    Returns:
        ``loss`` as above, ``nll`` the mean of the two passes' summed NLL, ``n_tokens`` N.
    """
    first = label_smoothed_nll(logits1, target, epsilon=epsilon, ignore_index=ignore_index)
    second = label_smoothed_nll(logits2, target, epsilon=epsilon, ignore_index=ignore_index)
    keep = target.reshape(-1).ne(ignore_index)
    dtype = torch.promote_types(logits1.dtype, torch.float32)  # float64 keeps its precision
    lp1 = F.log_softmax(logits1.reshape(-1, logits1.size(-1))[keep], dim=-1, dtype=dtype)  # (N, V)
    lp2 = F.log_softmax(logits2.reshape(-1, logits2.size(-1))[keep], dim=-1, dtype=dtype)
    kl_12 = (lp1.exp() * (lp1 - lp2)).sum()  # sum_t KL(p_1,t || p_2,t)
    kl_21 = (lp2.exp() * (lp2 - lp1)).sum()
    loss = 0.5 * (first.loss + second.loss) + 0.5 * alpha * 0.5 * (kl_12 + kl_21)
    return LossOutput(loss=loss, nll=0.5 * (first.nll + second.nll), n_tokens=first.n_tokens)


def target_log_probs(logits: Tensor, target: Tensor, *, ignore_index: int) -> Tensor:
    """Log-probability of each gold token, 0 at ``ignore_index`` (padding).

    The unsmoothed per-token term of the loss (``-nll``), normalized in float32 or wider as
    the loss and the search's step do (``log_softmax`` over V): forced decoding
    (seq2seq.decode.scoring) sums these.

    Args:
        logits: (..., V) unnormalized scores.
        target: (...) gold ids.
        ignore_index: the padding id.

    Returns:
        (...) log-probabilities, in float32 (float64 logits keep float64).
    """
    log_probs = logits.log_softmax(dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    keep = target.ne(ignore_index)
    gold = log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    return gold.masked_fill(~keep, 0.0)


class _SmoothedNLL(torch.autograd.Function):
    """Per-token label-smoothed loss and NLL with one fused backward pass.

    Autograd through log_softmax, gather and mean makes four passes over the (N, V) tensor
    in the backward (the mean's gradient, the gather's zero-filled scatter, their sum, the
    log-softmax backward); the gradient itself is simple (:func:`_logit_grad_`) and is
    computed here from the saved log-probabilities, in one pass.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        # At least float32 (fp16/bf16 are upcast; float64 keeps its precision).
        log_probs = logits.log_softmax(
            dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)
        )
        ctx.save_for_backward(log_probs, target)
        ctx.epsilon = epsilon
        ctx.logits_dtype = logits.dtype
        # log-probabilities: logits whose log-sum-exp is 0
        return _losses(*_gold_and_mean(log_probs, target), 0.0, epsilon)

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        log_probs, target = ctx.saved_tensors
        grad = _logit_grad_(log_probs.exp(), target, ctx.epsilon, grad_loss, grad_nll)
        return grad.to(ctx.logits_dtype), None, None


def _logit_grad_(
    probs: Tensor, t: Tensor, epsilon: float, on_loss: Tensor | None, on_nll: Tensor | None
) -> Tensor:
    """d(sum_i on_loss_i loss_i + on_nll_i nll_i) / d logits, written into ``probs`` (n, V).

    With p = softmax(logits):

        d loss_i / d logits_ij = p_ij - (1 - eps) [j = t_i] - eps / V
        d nll_i  / d logits_ij = p_ij - [j = t_i]

    ``on_loss`` and ``on_nll`` are (n,) weights; None means 1 for the loss and 0 for the NLL
    (the gradient of ``loss.sum()``).
    """
    n, vocab = probs.shape
    if on_loss is None:
        probs.sub_(epsilon / vocab)
        on_gold = probs.new_full((n, 1), 1.0 - epsilon)
    else:
        on_loss, on_nll = on_loss.unsqueeze(1), on_nll.unsqueeze(1)
        probs.mul_(on_loss + on_nll).sub_(epsilon / vocab * on_loss)
        on_gold = (1.0 - epsilon) * on_loss + on_nll
    return probs.scatter_add_(1, t.unsqueeze(1), -on_gold)


def projected_label_smoothed_nll(
    hidden: Tensor,
    weight: Tensor,
    target: Tensor,
    *,
    epsilon: float,
    chunk_rows: int = 512,
    compute_dtype: torch.dtype | None = None,
) -> LossOutput:
    """``label_smoothed_nll(hidden @ weight.T, target)``, without padding, computed in chunks.

    The (N, V) logits of a batch (125 MB for 4k tokens and 8k pieces) never exist at once:
    each chunk of ``chunk_rows`` tokens is projected, normalised and differentiated while
    its logits are still in the CPU cache, which makes the vocabulary projection and softmax
    cheaper on the CPU and saves the (N, V) activations. The gradient of the
    loss is computed in the forward pass for the common case (backward of ``loss.sum()``
    times a constant, the NLL only logged) and exactly recomputed otherwise.

    With ``compute_dtype=torch.bfloat16`` (bf16 mixed precision) the three matrix multiplies
    per chunk (logits, and the gradients of hidden and weight) run in bf16, the weight cast
    once per call; the log-softmax, the losses and the logits' gradient are float32, and the
    weight's gradient is accumulated over the chunks in the weight's own dtype (float32: the
    master weights). The hidden states' gradient comes back in their dtype.

    Args:
        hidden: (N, D) decoder states of the non-padding target positions.
        weight: (V, D) output projection (no bias).
        target: (N,) gold ids, none of them padding.
        epsilon: label smoothing.
        chunk_rows: tokens per chunk.
        compute_dtype: dtype of the multiplies (default: hidden's).
    """
    dtype = compute_dtype or hidden.dtype
    loss, nll = _ProjectedLoss.apply(weight, target, epsilon, 0.0, chunk_rows, dtype, hidden)
    return LossOutput(loss=loss.sum(), nll=nll.sum(), n_tokens=int(target.numel()))


def projected_rdrop_loss(
    hidden1: Tensor,
    hidden2: Tensor,
    weight: Tensor,
    target: Tensor,
    *,
    epsilon: float,
    alpha: float,
    chunk_rows: int = 512,
    compute_dtype: torch.dtype | None = None,
) -> LossOutput:
    """``rdrop_loss(hidden1 @ weight.T, hidden2 @ weight.T, target)``, computed in chunks.

    The two passes' projections, label-smoothed losses and symmetric KL run chunk by chunk
    as in :func:`projected_label_smoothed_nll`, with the gradient of every term written in
    closed form (:func:`_rdrop_logit_grads`): autograd through two (N, V) log-softmaxes, the
    exponentials and the KL makes about ten passes over (N, V) tensors in memory, this makes
    them on a chunk in cache.

    Args:
        hidden1: (N, D) the first pass' decoder states of the non-padding target positions.
        hidden2: (N, D) the second pass' states of the same positions.
        weight: (V, D) output projection (no bias).
        target: (N,) gold ids, none of them padding.
        epsilon: label smoothing.
        alpha: weight of the KL term (:func:`rdrop_loss`).
        chunk_rows: tokens per chunk.
        compute_dtype: dtype of the multiplies (default: hidden1's).
    """
    dtype = compute_dtype or hidden1.dtype
    loss, nll = _ProjectedLoss.apply(
        weight, target, epsilon, alpha, chunk_rows, dtype, hidden1, hidden2
    )
    return LossOutput(loss=loss.sum(), nll=nll.sum(), n_tokens=int(target.numel()))


def _softmax_(z: Tensor) -> Tensor:
    """Turn (n, V) logits into their softmax in place; return the (n,) log-sum-exp.

    ``log_softmax`` followed by ``exp`` computes every exponential twice and writes two new
    (n, V) tensors; this computes each once, in the logits' own memory.
    """
    top = z.amax(dim=-1, keepdim=True)
    z.sub_(top).exp_()
    total = z.sum(dim=-1, keepdim=True)
    z.div_(total)
    return (top + total.log()).squeeze(1)


def _gold_and_mean(z: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """(n,) gold values and row means of (n, V) logits or log-probabilities: what the loss
    needs of logits before :func:`_softmax_` overwrites them."""
    return z.gather(1, t.unsqueeze(1)).squeeze(1), z.mean(dim=-1)


def _losses(
    gold: Tensor, mean: Tensor, lse: Tensor | float, epsilon: float
) -> tuple[Tensor, Tensor]:
    """Per-token (label-smoothed loss, nll) from the logits' (n,) gold values and means and
    their (n,) log-sum-exp: nll = lse - z_t, and the uniform term -mean_v lp_v = lse - mean_v
    z_v."""
    nll = lse - gold
    return (1.0 - epsilon) * nll + epsilon * (lse - mean), nll


def _rdrop_logit_grads(
    logits: tuple[Tensor, Tensor],
    t: Tensor,
    epsilon: float,
    alpha: float,
    on_loss: Tensor | None,
    on_nll: Tensor | None,
    *,
    spare: tuple[Tensor, Tensor],
    want_grads: bool,
) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor] | None]:
    """Per-token (loss, nll) of :func:`rdrop_loss` and, if asked, its logits' gradients.

    With z_k the passes' (n, V) logits, p_k = softmax(z_k), lp_k = log p_k, d = lp1 - lp2 and
    e_k = sum_v p_k d, the symmetric KL of a token is KL(p1||p2) + KL(p2||p1) = e1 - e2, and

        d (e1 - e2) / d z1 = p1 (d - e1 + 1) - p2
        d (e1 - e2) / d z2 = p2 (1 - d + e2) - p1

    the label-smoothed terms differentiating as in :func:`_logit_grad_`. The log-probabilities
    are never written: d = (z1 - z2) - delta, delta = lse1 - lse2 a constant per token, so
    e_k = sum_v p_k (z1 - z2) - delta, and delta joins the per-token constants of the
    gradients. ``on_loss``/``on_nll``: per-token weights of the gradient (None: 1 and 0).
    Consumes ``logits`` and ``spare`` (two (n, V) buffers of the logits' dtype): the
    gradients are written into the spare ones.
    """
    z1, z2 = logits
    gold1, mean1 = _gold_and_mean(z1, t)
    gold2, mean2 = _gold_and_mean(z2, t)
    zd = torch.sub(z1, z2, out=spare[0])  # d + delta
    lse1, lse2 = _softmax_(z1), _softmax_(z2)
    p1, p2 = z1, z2
    loss1, nll1 = _losses(gold1, mean1, lse1, epsilon)
    loss2, nll2 = _losses(gold2, mean2, lse2, epsilon)
    delta = lse1 - lse2
    # row-wise dot products, the products written into a spare buffer (einsum and
    # linalg.vecdot are slower on the CPU: docs/results.md, "The cost of R-Drop")
    e1 = torch.mul(p1, zd, out=spare[1]).sum(dim=-1) - delta  # KL(p1 || p2)
    e2 = torch.mul(p2, zd, out=spare[1]).sum(dim=-1) - delta  # -KL(p2 || p1)
    loss = 0.5 * (loss1 + loss2) + 0.25 * alpha * (e1 - e2)
    nll = 0.5 * (nll1 + nll2)
    if not want_grads:
        return (loss, nll), None
    n, vocab = p1.shape
    # the weights: 0-dim, or (n, 1) per token
    a = p1.new_tensor(1.0) if on_loss is None else on_loss.unsqueeze(1).to(p1.dtype)
    c = p1.new_tensor(0.0) if on_nll is None else on_nll.unsqueeze(1).to(p1.dtype)
    b = 0.25 * alpha * a  # the KL's weight
    mean_weight, uniform = 0.5 * (a + c), 0.5 * epsilon / vocab * a
    on_gold = (-0.5 * ((1.0 - epsilon) * a + c)).expand(n, 1)
    # Out-of-place arithmetic between (n, 1) and (n, V) tensors is several times slower on
    # the CPU than in place: the two gradients are built in place, in the spare buffers.
    # g1 = p1 (mean_weight + b (1 - e1 - delta) + b zd) - b p2 - uniform, and the gold term
    g1 = (
        torch.mul(zd, b, out=spare[1])
        .add_(mean_weight + b * (1.0 - e1 - delta).unsqueeze(1))
        .mul_(p1)
    )
    g1.addcmul_(p2, b, value=-1.0).sub_(uniform).scatter_add_(1, t.unsqueeze(1), on_gold)
    # g2 = p2 (mean_weight + b (1 + e2 + delta) - b zd) - b p1 - uniform
    g2 = zd.mul_(-b).add_(mean_weight + b * (1.0 + e2 + delta).unsqueeze(1)).mul_(p2)
    g2.addcmul_(p1, b, value=-1.0).sub_(uniform).scatter_add_(1, t.unsqueeze(1), on_gold)
    return (loss, nll), (g1, g2)


def _chunks(
    hiddens: tuple[Tensor, ...],
    weight: Tensor,
    target: Tensor,
    epsilon: float,
    alpha: float,
    chunk_rows: int,
    *,
    losses: tuple[Tensor, Tensor] | None,
    grads: tuple[tuple[Tensor, ...], Tensor] | None,
    on_loss: Tensor | None = None,
    on_nll: Tensor | None = None,
) -> None:
    """Project the ``hiddens`` (one pass, or R-Drop's two) chunk by chunk and fill what is given.

    ``hiddens`` (N, D) each and ``weight`` (V, D) are in the compute dtype. ``losses``:
    (loss, nll), each (N,), receive the per-token values. ``grads``: (one grad_h (N, D) per
    pass in the compute dtype, grad_w (V, D) zeroed, in any float dtype) receive the gradient
    weighted by ``on_loss``/``on_nll`` (see :func:`_logit_grad_`).
    """
    soft_dtype = torch.promote_types(hiddens[0].dtype, torch.float32)
    rows, vocab = min(chunk_rows, target.size(0)), weight.size(0)
    # (rows, V) buffers that every chunk reuses (new ones per chunk would each be allocated,
    # and be fresh pages where freed memory is not kept): each pass' logits in the softmax
    # dtype, becoming its probabilities and then its gradient; the logits in the compute dtype
    # where it differs (bf16), and a bf16 copy of the gradient for the multiplies; R-Drop's
    # two spares.
    logits = [weight.new_empty(rows, vocab, dtype=soft_dtype) for _ in hiddens]
    low = weight.new_empty(rows, vocab) if weight.dtype != soft_dtype else None
    two_passes = len(hiddens) == 2
    spare = [weight.new_empty(rows, vocab, dtype=soft_dtype) for _ in range(2 if two_passes else 0)]
    for start in range(0, target.size(0), chunk_rows):
        end = min(start + chunk_rows, target.size(0))
        hs, t, n = [h[start:end] for h in hiddens], target[start:end], end - start
        zs = [z[:n] for z in logits]
        for h, z in zip(hs, zs):
            if low is None:
                torch.mm(h, weight.t(), out=z)
            else:
                z.copy_(torch.mm(h, weight.t(), out=low[:n]))
        weights = (None, None) if on_loss is None else (on_loss[start:end], on_nll[start:end])
        if two_passes:
            values, logit_grads = _rdrop_logit_grads(
                tuple(zs), t, epsilon, alpha, *weights,
                spare=(spare[0][:n], spare[1][:n]), want_grads=grads is not None,
            )  # fmt: skip
        else:
            gold, mean = _gold_and_mean(zs[0], t)
            values = _losses(gold, mean, _softmax_(zs[0]), epsilon)
            logit_grads = None
            if grads is not None:
                logit_grads = (_logit_grad_(zs[0], t, epsilon, *weights),)
        if losses is not None:
            losses[0][start:end], losses[1][start:end] = values
        if grads is None:
            continue
        for h, g, grad_h in zip(hs, logit_grads, grads[0]):
            if low is not None:
                g = low[:n].copy_(g)
            torch.mm(g, weight, out=grad_h[start:end])
            if grads[1].dtype == g.dtype:
                grads[1].addmm_(g.t(), h)
            else:  # a bf16 product per chunk, summed in float32
                grads[1].add_(torch.mm(g.t(), h))


class _ProjectedLoss(torch.autograd.Function):
    """Chunked ``hidden @ weight.T`` -> per-token (loss, nll), for one pass (the label-smoothed
    loss, :func:`projected_label_smoothed_nll`) or two (R-Drop, :func:`projected_rdrop_loss`).

    Computes in float32, float64 or bfloat16 (``compute_dtype``), whatever autocast says:
    the multiplies take the dtype they are given.
    """

    @staticmethod
    def forward(ctx, weight, target, epsilon, alpha, chunk_rows, compute_dtype, *hiddens):
        compute_dtype = compute_dtype or hiddens[0].dtype
        with torch.autocast(hiddens[0].device.type, enabled=False):
            hs, w = [h.to(compute_dtype) for h in hiddens], weight.to(compute_dtype)
            n = target.size(0)
            if compute_dtype == torch.bfloat16 and w.device.type == "cpu":
                # Zero rows up to a bucket size, so the last chunk's shape is one of a few
                # and oneDNN reuses its kernels (seq2seq.model.shape_buckets); dropped below.
                extra = padded_rows(n) - n
                hs, target = [F.pad(h, (0, 0, 0, extra)) for h in hs], F.pad(target, (0, extra))
            loss_dtype = torch.promote_types(compute_dtype, torch.float32)
            rows = target.size(0)
            losses = w.new_empty(rows, dtype=loss_dtype), w.new_empty(rows, dtype=loss_dtype)
            # The gradient of loss.sum(), computed while each chunk is in cache: used as is
            # when that (times a constant) is what the backward asks for.
            grads = None
            if any(ctx.needs_input_grad):
                grads = tuple(torch.empty_like(h) for h in hs), torch.zeros_like(weight)
            _chunks(tuple(hs), w, target, epsilon, alpha, chunk_rows, losses=losses, grads=grads)
        saved = (*grads[0], grads[1]) if grads is not None else (None,) * (len(hs) + 1)
        ctx.save_for_backward(w, target, *hs, *saved)
        ctx.epsilon, ctx.alpha, ctx.chunk_rows, ctx.n = epsilon, alpha, chunk_rows, n
        ctx.hidden_dtypes, ctx.weight_dtype = [h.dtype for h in hiddens], weight.dtype
        if rows > n:
            return losses[0][:n].clone(), losses[1][:n].clone()
        return losses

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        w, target, *rest = ctx.saved_tensors
        passes = len(ctx.hidden_dtypes)
        hs, grad_hs, grad_w = rest[:passes], rest[passes:-1], rest[-1]
        n, extra = ctx.n, target.size(0) - ctx.n  # extra: the zero rows forward added
        nones = (None,) * 5
        if n == 0:
            zeros = [torch.zeros_like(h, dtype=dt) for h, dt in zip(hs, ctx.hidden_dtypes)]
            return (torch.zeros_like(w, dtype=ctx.weight_dtype), *nones, *zeros)
        if not bool(grad_nll.any()) and bool((grad_loss == grad_loss[0]).all()):
            scale = grad_loss[0]
            scaled = [(g[:n] * scale).to(dt) for g, dt in zip(grad_hs, ctx.hidden_dtypes)]
            return (grad_w * scale, *nones, *scaled)
        # General case (per-token weights, or the NLL differentiated too): recompute exactly.
        grads = tuple(torch.empty_like(h) for h in hs), torch.zeros_like(w, dtype=ctx.weight_dtype)
        _chunks(
            tuple(hs), w, target, ctx.epsilon, ctx.alpha, ctx.chunk_rows, losses=None, grads=grads,
            on_loss=F.pad(grad_loss, (0, extra)), on_nll=F.pad(grad_nll, (0, extra)),
        )  # fmt: skip
        grad_hs = [g[:n].to(dt) for g, dt in zip(grads[0], ctx.hidden_dtypes)]
        return (grads[1], *nones, *grad_hs)
