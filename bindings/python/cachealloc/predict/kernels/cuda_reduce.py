"""The global-memory buffers of torch's CUDA reduction kernel.

gpu_reduce_kernel (ATen/native/cuda/Reduce.cuh, torch 2.11) reduces in
several thread blocks per output when each output has many inputs and
there are few outputs (e.g. a Linear layer's bias gradient: grad.sum(0) of
a (tokens, features) tensor). Those blocks meet in global memory: after
the op's output, it asks the caching allocator for a staging buffer of
global_memory_size() bytes and then semaphore_size() bytes of semaphores,
and frees both when it returns (semaphores first: C++ destroys locals in
reverse). The fake run's meta functions allocate only the output.

setReduceConfig decides from the TensorIterator the reduction builds (its
dimensions reordered and coalesced) and from the device (SM count, max
threads per SM). This file repeats that decision for a strided input
reduced over some dimensions; sizes are bytes, strides elements unless
named *_bytes. Modelled ops: sum, mean, nansum, amax, amin and
linalg_vector_norm on cuda; others (var/std, argmax, max.dim ...) use other
accumulator types and are not modelled (at most one staging buffer per op
missed). Inputs beyond 32-bit indexing are split by torch into sub-
iterators: not modelled.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

MAX_NUM_THREADS = 512          # mnt_wrapper<T>::MAX_NUM_THREADS (256 for complex double)
WARP_SIZE = 32
MIN_VALUES_PER_THREAD = 16
MAX_VALUES_PER_THREAD = 256
VT0 = INPUT_VEC_SIZE = 4       # gpu_reduce_kernel's defaults, which these ops use


def _div_up(a: int, b: int) -> int:
    return (a + b - 1) // b


def _last_pow2(n: int) -> int:
    """Largest power of two <= n (at least 1)."""
    return max(1, 1 << (max(n, 1).bit_length() - 1))


def _iterator(sizes, in_strides, reduced, in_elem):
    """The reduction's TensorIterator after reorder_dimensions and
    coalesce_dimensions: (shape, [output strides, input strides]) in bytes,
    fastest dimension first. The output is the keepdim result, contiguous,
    with stride 0 in reduced dimensions."""
    nd = len(sizes)
    out_strides, acc = [0] * nd, 1
    for d in reversed(range(nd)):
        if d not in reduced:
            out_strides[d] = acc
            acc *= sizes[d]
    ops = [[s * 4 for s in out_strides], [s * in_elem for s in in_strides]]

    def should_swap(d0, d1):
        for k, st in enumerate(ops):
            s0, s1 = st[d0], st[d1]
            if k == 0 and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if sizes[d0] > sizes[d1]:     # equal strides: the smaller size goes first
                return 1
        return 0

    perm = list(reversed(range(nd)))
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    shape = [sizes[p] for p in perm]
    strides = [[st[p] for p in perm] for st in ops]
    if nd == 0:
        return shape, strides
    prev = 0
    for d in range(1, nd):
        s0, s1 = shape[prev], shape[d]
        if s0 == 1 or s1 == 1 or all(s0 * st[prev] == st[d] for st in strides):
            if shape[prev] == 1:
                for st in strides:
                    st[prev] = st[d]
            shape[prev] *= shape[d]
        else:
            prev += 1
            if prev != d:
                for st in strides:
                    st[prev] = st[d]
                shape[prev] = shape[d]
    return shape[:prev + 1], [st[:prev + 1] for st in strides]


def buffers(inp: torch.Tensor, dims, acc_bytes: int, num_sms: int,
            max_threads_per_sm: int = 2048):
    """(global_memory_size, semaphore_size) in bytes for reducing `inp`
    over `dims` (empty: all), or (0, 0) when no global reduction happens."""
    nd = inp.dim()
    reduced = {d % nd for d in dims} if (dims and nd) else set(range(nd))
    numel = inp.numel()
    if numel == 0:
        return 0, 0
    in_elem = inp.element_size()
    shape, (out_st, in_st) = _iterator(list(inp.shape), list(inp.stride()), reduced, in_elem)
    ndim = len(shape)
    num_reduce = sum(1 for s in out_st if s == 0)
    num_outputs = 1
    for s, o in zip(shape, out_st):
        if o != 0:
            num_outputs *= s
    inputs_per_output = numel // num_outputs
    if inputs_per_output <= 1:
        return 0, 0
    if ndim > 0:
        on_fastest = num_reduce == ndim or in_st[0] < in_st[num_reduce]
        if on_fastest:
            dim0, dim1, fastest = inputs_per_output, num_outputs, in_st[0]
        else:
            dim0, dim1, fastest = num_outputs, inputs_per_output, in_st[num_reduce]
    else:
        on_fastest, fastest, dim0, dim1 = True, in_elem, 1, 1
    out_vec = 1
    if fastest == in_elem:
        if on_fastest and dim0 >= 128 and num_reduce == 1:
            dim0 //= INPUT_VEC_SIZE
        elif not on_fastest:
            # get_output_vec_size: the input's address, the output dimension's
            # size and the input's other strides must all divide the vector.
            out_vec = 4
            for n in [inp.storage_offset(), shape[num_reduce]] + \
                     [s // in_elem for j, s in enumerate(in_st) if j != num_reduce]:
                while n % out_vec:
                    out_vec //= 2
            dim0 //= out_vec
    max_threads = MAX_NUM_THREADS // out_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, WARP_SIZE)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    threads = width * height
    step_in, step_out = 1, 1
    block_x_reduce = ndim == 0 or on_fastest
    if block_x_reduce:
        step_in *= width
    else:
        step_out *= width
    values = _div_up(inputs_per_output, step_in)
    split_warps = values >= min(height * 16, MAX_VALUES_PER_THREAD)
    if split_warps:
        step_in *= height
    else:
        step_out *= height
    grid_x = _div_up(num_outputs // out_vec, step_out)
    target = num_sms * (max_threads_per_sm // threads)
    values = _div_up(inputs_per_output, step_in)
    if not (split_warps and values >= MAX_VALUES_PER_THREAD and grid_x <= target):
        return 0, 0
    ctas = max(min(_div_up(target, grid_x), _div_up(values, MIN_VALUES_PER_THREAD)),
               _div_up(values, MAX_VALUES_PER_THREAD))
    if ctas <= 1:
        return 0, 0
    size = acc_bytes * num_outputs * ctas
    if not block_x_reduce:
        size *= width * out_vec
    return size, 4 * grid_x


def _acc_bytes(dtype) -> int:
    """sizeof(arg_t) of sum/mean/norm: float for 16- and 32-bit floats,
    double for double, complex of those for complex, int64 for integers."""
    if dtype.is_complex:
        return 16 if dtype == torch.complex128 else 8
    if dtype.is_floating_point:
        return 8 if dtype == torch.float64 else 4
    return 8


def _same_type_bytes(dtype) -> int:
    """amax/amin accumulate in the input's own type."""
    return torch.empty((), dtype=dtype).element_size()


def max_threads_per_sm(capability) -> int:
    """cudaDeviceProp::maxThreadsPerMultiProcessor by compute capability."""
    if capability in ((8, 6), (8, 7), (8, 9)) or capability[0] == 12:
        return 1536
    if capability == (7, 5):
        return 1024
    return 2048


def _reduce_model(dims_at, acc=_acc_bytes):
    def model(rec, args, kwargs, out):
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                rec.track(t)
        inp = args[0]
        if not isinstance(inp, torch.Tensor) or inp.device.type != "cuda":
            return
        dims = kwargs.get("dim", args[dims_at] if dims_at is not None and len(args) > dims_at else None)
        if isinstance(dims, int):
            dims = [dims]
        stage(rec, inp, list(dims or []), acc(inp.dtype))
    return model


def stage(rec, inp: torch.Tensor, dims, acc_bytes: int) -> None:
    """Records the staging buffer and semaphores a reduction of `inp` over
    `dims` asks for after its output on the recording's GPU (buffers()),
    both freed at once, semaphores first; nothing when it needs none."""
    gpu = rec.gpu
    size, sem = buffers(inp, dims, acc_bytes, gpu.multi_processor_count,
                        max_threads_per_sm(tuple(gpu.capability)))
    if size:
        staged(rec, size, sem)


def staged(rec, size: int, sem: int) -> None:
    """A kernel's grid meeting in global memory: a staging buffer of `size`
    bytes, then `sem` bytes of semaphores, both freed when it returns,
    semaphores first (C++ destroys locals in reverse)."""
    buf = rec.alloc(size, rec.stream)
    rec.free(rec.alloc(sem, rec.stream), rec.stream)
    rec.free(buf, rec.stream)


MODELS = {
    aten.sum.dim_IntList: _reduce_model(1),
    aten.sum.default: _reduce_model(None),
    aten.mean.dim: _reduce_model(1),
    aten.mean.default: _reduce_model(None),
    aten.nansum.default: _reduce_model(1),
    aten.amax.default: _reduce_model(1, acc=_same_type_bytes),
    aten.amin.default: _reduce_model(1, acc=_same_type_bytes),
    aten.linalg_vector_norm.default: _reduce_model(2),
}
