"""Switches cachealloc on in programs that never import it.

Run at every interpreter start-up by cachealloc-autoinstall.pth, which
`pip install` puts in site-packages. It does nothing unless
CACHEALLOC_AUTO=1 (`cachealloc run` sets it; child processes, torchrun's
workers among them, inherit it). Then, right after the program's
`import torch` completes, it calls cachealloc.install(conf=$CACHEALLOC_CONF,
backend=$CACHEALLOC_BACKEND, snapshot_dir=$CACHEALLOC_SNAPSHOT_DIR): before
the program can allocate CUDA memory, and never in a process that does not
use torch (neither torch nor cachealloc is imported here). The policy is
install()'s default, $CACHEALLOC_POLICY, which the library reads itself.

It must never break the interpreter: any failure prints one warning on
stderr and PyTorch keeps its own allocator.
"""
import os
import sys

_SWITCH = "CACHEALLOC_AUTO"


def _warn(message: str) -> None:
    sys.stderr.write(f"cachealloc: {message}\n")


def _install() -> None:
    try:
        import cachealloc

        cachealloc.install(conf=os.environ.get("CACHEALLOC_CONF"),
                           backend=os.environ.get("CACHEALLOC_BACKEND") or None,
                           snapshot_dir=os.environ.get("CACHEALLOC_SNAPSHOT_DIR") or None)
    except Exception as e:  # the program must run on, under PyTorch's allocator
        _warn(f"{_SWITCH}=1 but cachealloc.install() failed, PyTorch's own CUDA allocator stays "
              f"in use: {type(e).__name__}: {e}")


class _AfterTorchImport:
    """A sys.meta_path finder that only watches for `torch`: it lets the
    normal finders find it and calls _install() once its module has run.
    One-shot: it leaves sys.meta_path at the first `import torch`."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
            import importlib.util

            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)  # torch's own import; its errors propagate unchanged
                _install()

            spec.loader.exec_module = exec_module  # this spec's loader instance only
            return spec
        except Exception as e:
            _warn(f"{_SWITCH}=1 but watching for `import torch` failed ({type(e).__name__}: {e}); "
                  "cachealloc stays off")
            return None


def _arm() -> None:
    value = os.environ.get(_SWITCH, "")
    if value in ("", "0"):
        return
    if value != "1":
        _warn(f"{_SWITCH}={value!r} is neither 1 (on) nor 0 (off); cachealloc stays off")
        return
    if "torch" in sys.modules:  # imported before site ran (embedding): install now
        _install()
    else:
        sys.meta_path.insert(0, _AfterTorchImport())


_arm()
