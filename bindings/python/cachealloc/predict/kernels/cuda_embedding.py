"""What the CUDA embedding asks the caching allocator for.

Forward (ATen/native/Embedding.cpp, `embedding_symint`): indices of more
than one dimension are flattened with `indices.reshape(-1)` before
`index_select`; when they cannot be viewed flat (an expanded tensor, e.g.
BERT's token-type ids `buffer.expand(batch, seq)`, batch stride 0), reshape
copies them: the copy (numel x I) is allocated before the output and freed
after it. The fake run's embedding makes no such copy.

Backward:

torch 2.11's embedding_dense_backward_cuda (ATen/native/cuda/Embedding.cu,
EmbeddingBackwardKernel.cu) makes its inputs contiguous, and with few
indices (n <= 3072, no scale_grad_by_freq) adds rows straight into a zeroed
grad_weight (the op's output only, as the fake run records). With more
indices it sorts them and sums each run of equal ids in two steps, through
temporaries whose sizes depend only on the shapes (their upper bounds: no
size is read back from the GPU). n = indices.numel(), I = the index
element size, D = the embedding dim, in this order:

  1. indices.contiguous(), grad.contiguous(): copies when strided;
  2. sorted_indices, orig_indices (n x I each);
  3. arange(n) (n x I) and the radix sort's CUB storage (SortPairs, keys
     and values of I bytes, all key bits); storage freed, then arange;
  4. scale_grad_by_freq only: count (n x I) [its two CUB scan-by-key
     storages are not modelled];
  5. grad_weight (the output, zeroed), segment_offsets (n x I), the
     segment count (8 B);
  6. unique-by-key: a keys-out buffer (n x I) and its CUB storage, freed
     storage first;
  7. partials_per_segment, partials_per_segment_offset (m x I each,
     m = min(n, num_weights)), the exclusive sum's CUB storage (freed);
  8. the partial-segment count (8 B), partial_segment_offset (p x I,
     p = n // 10 + m: NROWS_PER_THREAD = 10 rows per partial sum) and
     grad_weight_per_segment (p x D of the accumulator type: fp32 for
     fp16/bf16 gradients); or, when the per-segment sum would have too
     few thread blocks for the GPU (few distinct rows: BERT's 2 token
     types; `_fused`), partial_to_segment_idx (p x I) instead, plus for
     fp16/bf16 a zeroed fp32 copy of grad_weight (freed at once);
  9. on return, C++ destroys them in reverse: 8's three, 7's two, 5's two
     temporaries, then count, orig_indices, sorted_indices, the grad copy
     and the indices copy.

Sizes in bytes. CUB's storage sizes: cub_storage.py. Checked request for
request on the H200 recording of GPT-2 small (bf16, 4 x 1024 int64 ids).
"""
from __future__ import annotations

import torch

from . import cub_storage

aten = torch.ops.aten

NROWS_PER_THREAD = 10          # rows one partial sum covers (EmbeddingBackwardKernel.cu)
FEATURE_KERNEL_MAX = 3072      # at most this many indices: no sort, no temporaries
_SEGMENT_COUNT = 8             # the int64 scalars holding the segment counts
WARP_SIZE = 32                 # NVIDIA
MAX_BLOCK_SIZE = 1024          # threads per block, at most
MAX_ATOMIC_ACCUM_BLOCKS_PER_SM = 4   # fewer per-segment blocks than this per SM: fused


def _accumulator_bytes(dtype: torch.dtype, itemsize: int) -> int:
    return 4 if dtype in (torch.float16, torch.bfloat16) else itemsize


def _fused(rec, m: int, p: int, dim: int) -> bool:
    """Whether the backward adds the partial sums straight into grad_weight
    (atomics) instead of keeping them all and summing per segment: when
    the per-segment sum would run on too few blocks (few distinct rows, m)
    for the GPU, there are many more partial sums, and deterministic
    algorithms are off (EmbeddingBackwardKernel.cu, use_fused_kernel)."""
    stride_warped = -(-dim // WARP_SIZE) * WARP_SIZE
    block = min(stride_warped, MAX_BLOCK_SIZE)
    sum_scatter_grid = -(-(m * stride_warped) // block)
    return (sum_scatter_grid < rec.gpu.multi_processor_count * MAX_ATOMIC_ACCUM_BLOCKS_PER_SM
            and p > sum_scatter_grid * 4 and not torch.are_deterministic_algorithms_enabled())


def _copy_if_strided(rec, t):
    if t.is_contiguous() or t.numel() == 0:
        return None
    return rec.alloc(t.numel() * t.element_size(), rec.stream)


def _embedding_dense_backward(rec, args, kwargs, out):
    grad, indices, num_weights = args[0], args[1], int(args[2])
    scale_grad_by_freq = bool(args[4]) if len(args) > 4 else bool(kwargs.get("scale_grad_by_freq"))
    stream = rec.stream
    indices_copy = _copy_if_strided(rec, indices)
    grad_copy = _copy_if_strided(rec, grad)
    n = indices.numel()
    if n <= FEATURE_KERNEL_MAX and not scale_grad_by_freq:
        rec.track(out)
    else:
        _sorted_backward(rec, grad, indices, num_weights, scale_grad_by_freq, out)
    for aid in (grad_copy, indices_copy):
        if aid is not None:
            rec.free(aid, stream)


def _sorted_backward(rec, grad, indices, num_weights, scale_grad_by_freq, out):
    stream = rec.stream
    n = indices.numel()
    isz = indices.element_size()
    dim = grad.shape[-1] if grad.dim() else 1
    alloc = lambda nbytes: rec.alloc(nbytes, stream)   # noqa: E731
    free = lambda aid: rec.free(aid, stream)           # noqa: E731
    capability = tuple(rec.gpu.capability)

    sorted_indices = alloc(n * isz)
    orig_indices = alloc(n * isz)
    arange = alloc(n * isz)
    free(alloc(cub_storage.radix_sort_pairs_bytes(n, isz, isz, capability)))
    free(arange)
    count = alloc(n * isz) if scale_grad_by_freq else None

    rec.track(out)                                     # grad_weight (zeros)
    segment_offsets = alloc(n * isz)
    segment_count = alloc(_SEGMENT_COUNT)
    keys_out = alloc(n * isz)
    free(alloc(cub_storage.unique_by_key_bytes(n, isz)))
    free(keys_out)

    m = min(n, num_weights)
    partials = alloc(m * isz)
    partials_offset = alloc(m * isz)
    free(alloc(cub_storage.exclusive_sum_bytes(m, isz)))
    partial_count = alloc(_SEGMENT_COUNT)
    p = n // NROWS_PER_THREAD + m
    partial_offset = alloc(p * isz)
    acc = _accumulator_bytes(grad.dtype, grad.element_size())
    if _fused(rec, m, p, dim):
        # partial_to_segment_idx, then (fp16/bf16 only) an fp32 zeroed
        # grad_weight to add into atomically, freed after its copy back.
        per_segment = alloc(p * isz)
        if acc != grad.element_size():
            free(alloc(num_weights * dim * acc))
    else:
        per_segment = alloc(p * dim * acc)
    for aid in (per_segment, partial_offset, partial_count, partials_offset, partials,
                segment_count, segment_offsets, count, orig_indices, sorted_indices):
        if aid is not None:
            free(aid)


def _flattens_as_view(t) -> bool:
    """Whether reshape(-1) of t is a view: the dims of size > 1, outer to
    inner, each step over exactly the next one's span."""
    dims = [(n, st) for n, st in zip(t.shape, t.stride()) if n != 1]
    return all(dims[i][1] == dims[i + 1][1] * dims[i + 1][0] for i in range(len(dims) - 1))


def _embedding(rec, args, kwargs, out):
    indices = args[1] if len(args) > 1 else kwargs["indices"]
    copy = None
    if indices.dim() > 1 and indices.numel() and not _flattens_as_view(indices):
        copy = rec.alloc(indices.numel() * indices.element_size(), rec.stream)
    rec.track(out)
    if copy is not None:
        rec.free(copy, rec.stream)


MODELS = {
    aten.embedding.default: _embedding,
    aten.embedding_dense_backward.default: _embedding_dense_backward,
}
