"""PyTorch's run-time allocator settings reaching cachealloc.

torch.cuda.memory._set_allocator_settings(text) (torch 2.11: a deprecated
alias of torch._C._accelerator_setAllocatorSettings) only parses the text
into PyTorch's own config objects, which native's allocator reads at each
use; no allocator call is made, so an installed cachealloc would never see
it. install_settings_hook() wraps PyTorch's setter so that each call

1. is checked whole by cachealloc first. A valid text cachealloc cannot
   carry out (none at present; expandable_segments is carried out) raises
   ValueError naming the problem, and nothing changes, in PyTorch's config or in cachealloc's. An invalid text
   (unknown key, bad value, another backend) goes to PyTorch's setter,
   whose own error is
   raised (native's type and message), after whatever native itself applies
   before it stops; cachealloc's settings do not change;
2. then goes to PyTorch's setter as before (its pinned host allocator, which
   stays PyTorch's, reads the pinned_* keys from there);
3. then is applied to cachealloc for later requests, by native 2.11's rule
   for the keys it does not name (allocator/config/config.h,
   AllocatorConfig::with_settings).

Native differs in one respect: it applies the keys one by one as it parses
them, so a text with a bad key part way leaves the earlier keys (and its
resets of max_split_size_mb, roundup_power2_divisions and
garbage_collection_threshold) in force. cachealloc's allocator changes
nothing on a refused text (PyTorch's own config objects, which cachealloc
does not read for these keys, are left as native leaves them).
"""
from __future__ import annotations

from typing import Any, Callable

from ._native import check, lib

# The names torch releases give the setter in torch._C (newest first). Each
# one present is wrapped: torch.cuda.memory looks them up at call time.
_SETTER_NAMES = ("_accelerator_setAllocatorSettings",
                 "_cuda_cudaCachingAllocator_set_allocator_settings")


def install_settings_hook() -> None:
    """Wraps PyTorch's allocator-settings setters (idempotent)."""
    import torch

    for name in _SETTER_NAMES:
        original = getattr(torch._C, name, None)
        if original is None or getattr(original, "_cachealloc_wraps", None) is not None:
            continue
        setattr(torch._C, name, _wrapped(original))


def _wrapped(original: Callable[[str], Any]) -> Callable[[Any], Any]:
    def set_allocator_settings(settings: Any) -> Any:
        if not isinstance(settings, str):
            return original(settings)  # PyTorch's own TypeError
        if "\0" in settings:  # the C side would stop reading there
            raise ValueError(f"allocator settings must not contain NUL characters: {settings!r}")
        encoded = settings.encode()
        status = lib().cachealloc_check_allocator_settings(encoded)
        if status == -2:  # valid, but cachealloc cannot do it: PyTorch untouched
            raise ValueError(lib().cachealloc_last_error().decode())
        if status != 0:
            # Invalid: PyTorch refuses it too, and its own error (type and
            # message) is the one PyTorch's callers expect.
            ours = lib().cachealloc_last_error().decode()
            original(settings)
            raise ValueError(ours)  # PyTorch accepted what cachealloc refuses
        result = original(_without_own_backend(settings))
        check(lib().cachealloc_set_allocator_settings(encoded))
        return result

    set_allocator_settings._cachealloc_wraps = original
    set_allocator_settings.__name__ = getattr(original, "__name__", "set_allocator_settings")
    set_allocator_settings.__doc__ = getattr(original, "__doc__", None)
    return set_allocator_settings


# cachealloc's backend as PyTorch's config names it.
_BACKEND_NAMES = {"cuda": "native", "async": "cudaMallocAsync"}


def _without_own_backend(settings: str) -> str:
    """`settings` less a `backend:` key naming the backend already in use.

    Native accepts such a key at run time (it checks the name against its
    own allocator's). PyTorch asserts that name against the current
    allocator's name(), which for cachealloc's glue is "pluggable", so the
    key, already checked by cachealloc (a change of backend is refused
    there), is not passed on; the rest of the text is, unchanged."""
    own = _BACKEND_NAMES.get(lib().cachealloc_backend_name().decode())
    parts = [p for p in settings.split(",")
             if not (own and p.replace(" ", "") == f"backend:{own}")]
    return ",".join(parts)
