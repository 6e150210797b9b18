"""Checkpoint state as data that runs no code when read: plain JSON, arrays, and
(only on request) pickles.

:func:`encode_state` walks a state (nested dicts, lists, tuples) and splits it:

- plain data (``None``, ``bool``, ``int`` of any size, ``float``, ``str``, lists,
  dicts with str keys) stays as JSON;
- tuples, dicts with other keys (or with the key :data:`TAG`) and numpy scalars
  become tagged JSON objects ``{"__flowrl__": "tuple" | "dict" | "scalar", ...}``;
- numpy arrays and torch tensors of the dtypes safetensors stores (bool, ints,
  uints, float16/32/64; bfloat16 tensors as their int16 bits) go to one
  safetensors blob, referenced by key (``{"__flowrl__": "ndarray" | "tensor",
  "key": ...}``);
- anything else (a user class, a function) is cloudpickled and referenced as
  ``{"__flowrl__": "pickled", "key", "type", "where"}``, ``where`` being its
  place in the state (``"extra.schedule"``).

:func:`decode_state` reverses it from the parsed JSON and the loaded arrays. It
unpickles only when handed the pickles (the caller's ``allow_pickle``); otherwise
each pickled object reads back as a :class:`PickledValue` placeholder naming it,
which :func:`find_pickled` finds. Every malformed entry is a :class:`StateError`.

>>> import numpy as np
>>> body, arrays, pickles = encode_state({"n": 1, "w": np.zeros(2), "t": (1, 2)})
>>> body["w"], body["t"], pickles is None
({'__flowrl__': 'ndarray', 'key': '0'}, {'__flowrl__': 'tuple', 'items': [1, 2]}, True)
>>> import safetensors.numpy
>>> decode_state(body, safetensors.numpy.load(arrays))
{'n': 1, 'w': array([0., 0.]), 't': (1, 2)}
"""

from __future__ import annotations

import collections
import os
import pickle
import sys
from typing import Any

import numpy as np

from flowrl.errors import FlowError

TAG = "__flowrl__"
SAFE_DTYPES = {np.dtype(t).name: np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64)}


class PickledValue:
    """What an object of ``user_state.pkl`` reads back as without ``allow_pickle``:
    ``where`` (its place in the state, e.g. ``"extra.schedule"``), ``type_name``
    and ``file``; nothing of it was loaded.

    >>> PickledValue("extra.schedule", "mylib.Schedule", "/ck/user_state.pkl")
    PickledValue('extra.schedule': mylib.Schedule in '/ck/user_state.pkl')
    """

    def __init__(self, where: str, type_name: str, file: str):
        self.where, self.type_name, self.file = where, type_name, file

    def __repr__(self) -> str:
        return f"PickledValue({self.where!r}: {self.type_name} in {self.file!r})"


def find_pickled(value: Any) -> PickledValue | None:
    """The first :class:`PickledValue` inside ``value`` (dicts, lists, tuples), or None.

    >>> find_pickled({"a": [1, (2, PickledValue("a[1]", "T", "f"))]}).where
    'a[1]'
    """
    if isinstance(value, PickledValue):
        return value
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple)):
        for v in value:
            found = find_pickled(v)
            if found is not None:
                return found
    return None


# -- encoding: state -> (JSON document, arrays, pickles) ---------------------------
class _Encoder:
    """Walks a state: plain data stays, arrays and tensors go to ``arrays`` (by key),
    anything else is cloudpickled into ``pickled`` (by key), named by its place."""

    def __init__(self, path: str):
        self.path = path
        self.arrays: dict[str, np.ndarray] = {}
        self.pickled: dict[str, bytes] = {}

    def encode(self, x: Any, where: str) -> Any:
        kind = type(x)
        if x is None or kind in (bool, str, int, float):
            return x
        if isinstance(x, np.generic) and x.dtype.name in SAFE_DTYPES:
            return {TAG: "scalar", "dtype": x.dtype.name, "value": x.item()}
        if kind is list:
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(x)]
        if kind is tuple:
            return {TAG: "tuple", "items": [self.encode(v, f"{where}[{i}]")
                                            for i, v in enumerate(x)]}
        if kind in (dict, collections.OrderedDict):
            if TAG not in x and all(type(k) is str for k in x):
                return {k: self.encode(v, f"{where}.{k}") for k, v in x.items()}
            return {TAG: "dict", "items": [[self.encode(k, f"{where} key {k!r}"),
                                            self.encode(v, f"{where}[{k!r}]")]
                                           for k, v in x.items()]}
        if kind is np.ndarray and x.dtype.isnative and x.dtype.name in SAFE_DTYPES:
            return {TAG: "ndarray", "key": self._add_array(x)}
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            t = x.detach().cpu()
            if t.dtype == torch.bfloat16:
                return {TAG: "tensor", "key": self._add_array(t.view(torch.int16).numpy()),
                        "bfloat16": True}
            if str(t.dtype).removeprefix("torch.") in SAFE_DTYPES:
                return {TAG: "tensor", "key": self._add_array(t.numpy()), "bfloat16": False}
        return self._pickle(x, where)

    def _add_array(self, a: np.ndarray) -> str:
        key = str(len(self.arrays))
        self.arrays[key] = a if a.flags.c_contiguous else a.copy(order="C")  # keeps 0-d
        return key

    def _pickle(self, x: Any, where: str) -> dict:
        import cloudpickle
        type_name = f"{type(x).__module__}.{type(x).__qualname__}"
        try:
            data = cloudpickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # any error a __reduce__ raises means "does not pickle"
            raise FlowError(f"cannot save checkpoint {self.path!r}: {where} ({type_name}) is "
                            f"neither plain data nor an array and does not pickle "
                            f"({type(e).__name__}: {e}); make extra_state() return "
                            "plain data, arrays or picklable objects") from e
        key = str(len(self.pickled))
        self.pickled[key] = data
        return {TAG: "pickled", "key": key, "type": type_name, "where": where}


def encode_state(state: dict[str, Any], path: str = "<memory>") -> tuple[dict, bytes | None,
                                                                         bytes | None]:
    """``(body, arrays_bytes, pickles_bytes)`` for ``state``, a dict with str keys:
    ``body`` is JSON-able, ``arrays_bytes`` a safetensors blob and
    ``pickles_bytes`` a pickled ``{key: cloudpickle bytes}`` (each None when there
    is nothing of its kind). FlowError naming ``path`` and the object's place when
    something is neither data nor picklable."""
    enc = _Encoder(path)
    body = {k: enc.encode(v, k) for k, v in state.items()}
    arrays = user = None
    if enc.arrays:
        import safetensors.numpy
        arrays = safetensors.numpy.save(enc.arrays)
    if enc.pickled:
        user = pickle.dumps(enc.pickled, protocol=pickle.HIGHEST_PROTOCOL)
    return body, arrays, user


# -- decoding ----------------------------------------------------------------------
class StateError(ValueError):
    """An encoded state that does not decode (the message says which entry)."""


def decode_state(body: Any, arrays: dict[str, np.ndarray] | None = None,
                 pickles: dict[str, bytes] | None = None, pickles_file: str | None = None) -> Any:
    """The state :func:`encode_state` gave ``body`` for, its arrays looked up in
    ``arrays``. ``pickles`` (the loaded ``{key: bytes}``) are unpickled only when
    given; without them a pickled object is a :class:`PickledValue` naming
    ``pickles_file``. StateError when ``body`` is malformed."""
    try:
        return _Decoder(arrays or {}, pickles, pickles_file).decode(body)
    except RecursionError:
        raise StateError("nested too deeply") from None


class _Decoder:
    def __init__(self, arrays: dict[str, np.ndarray], pickled: dict[str, bytes] | None,
                 user_file: str | None):
        self.arrays, self.pickled, self.user_file = arrays, pickled, user_file

    def decode(self, x: Any) -> Any:
        if isinstance(x, list):
            return [self.decode(v) for v in x]
        if not isinstance(x, dict):
            return x
        if TAG not in x:
            return {k: self.decode(v) for k, v in x.items()}
        kind = x[TAG]
        if kind == "tuple":
            return tuple(self.decode(v) for v in self._field(x, "items", list))
        if kind == "dict":
            items = self._field(x, "items", list)
            if not all(isinstance(i, list) and len(i) == 2 for i in items):
                raise StateError("a tagged dict's items are not [key, value] pairs")
            try:
                return {self.decode(k): self.decode(v) for k, v in items}
            except TypeError as e:  # an unhashable key
                raise StateError(f"a tagged dict has an invalid key ({e})") from None
        if kind == "scalar":
            dtype = SAFE_DTYPES.get(self._field(x, "dtype", str))
            value = x.get("value")
            if dtype is None or type(value) not in (bool, int, float):
                raise StateError(f"invalid scalar {x!r}")
            return np.array(value, dtype=dtype)[()]
        if kind == "ndarray":
            return self._array(x)
        if kind == "tensor":
            import torch
            t = torch.from_numpy(self._array(x).copy())
            return t.view(torch.bfloat16) if x.get("bfloat16") is True else t
        if kind == "pickled":
            key, where = self._field(x, "key", str), self._field(x, "where", str)
            if self.user_file is None:
                raise StateError(f"{where!r} refers to a pickles file the checkpoint does "
                                 "not name")
            if self.pickled is None:
                return PickledValue(where, self._field(x, "type", str), self.user_file)
            if key not in self.pickled:
                raise StateError(f"{where!r} is missing from "
                                 f"{os.path.basename(self.user_file)}")
            import cloudpickle
            return cloudpickle.loads(self.pickled[key])
        raise StateError(f"unknown tag {TAG}={kind!r}")

    def _array(self, x: dict) -> np.ndarray:
        key = self._field(x, "key", str)
        if key not in self.arrays:
            raise StateError(f"array {key!r} is missing from the arrays file")
        return self.arrays[key]

    @staticmethod
    def _field(x: dict, name: str, kind: type) -> Any:
        value = x.get(name)
        if not isinstance(value, kind):
            raise StateError(f"a {x.get(TAG)!r} entry has no valid {name!r}")
        return value


__all__ = ["TAG", "SAFE_DTYPES", "PickledValue", "find_pickled", "encode_state",
           "decode_state", "StateError"]
