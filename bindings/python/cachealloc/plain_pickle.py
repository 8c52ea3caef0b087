"""Pickles of plain data only: dicts, lists, tuples, strings, bytes,
numbers, booleans and None, as memory snapshots are.

Any reference to a class or function (the pickle opcodes GLOBAL and
STACK_GLOBAL, through which a pickle runs code) is refused with
pickle.UnpicklingError naming it: a snapshot, a rank's file or a trace is
never trusted to run code. The one reader every cachealloc module and
script uses for snapshots; the C++ readers (pickle/) hold the same rule."""
import io
import pickle


class PlainUnpickler(pickle.Unpickler):
    """pickle.Unpickler that refuses every global."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain data is allowed")


def load(file):
    """The plain data of a binary file object holding one pickle."""
    return PlainUnpickler(file).load()


def loads(data: bytes):
    """The plain data of one pickle held in `data`."""
    return PlainUnpickler(io.BytesIO(data)).load()
