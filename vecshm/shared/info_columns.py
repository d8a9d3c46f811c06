"""Flat infos of numbers as typed columns in the info arena, so the hot path pickles no info.

ALE returns ``{"lives": 3, "episode_frame_number": 1234, "frame_number": 5678}`` on every step,
and most envs' infos are like it: a flat dict of numbers. Pickling it in the worker and unpickling it
in the parent costs about 1 us and 0.7 us per env per step, and the parent's share is paid while
every worker waits. An info of that kind is instead written as one 8-byte word per key at the start
of the env's arena row, followed by its *schema* (the keys and the value types, pickled once per
schema and written after the values). The row's length word says which schema it is, so the parent
reads the values of a whole batch as one NumPy array when the envs share a schema, and only
unpickles a schema the first time it meets it.

Values come back as the env gave them: a Python ``int`` stays an ``int``, an ``np.float32`` an
``np.float32``, bit for bit (8 bytes hold every value of the types allowed here). Anything else (an
int beyond 64 bits, a string, an array, a nested dict, a key that is not a string, ``np.bool_``,
which Gymnasium batches as objects) takes the pickled path, as before.

The length word is ``INFO_COLUMNS_BASE - code``, where ``code`` packs a 48-bit hash of the schema
with its number of keys: the parent can find the schema in a row it has never read, and needs no
state shared with the worker (a restarted worker writes the same codes).
"""

from __future__ import annotations

import hashlib
import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

__all__ = ["INFO_COLUMNS_BASE", "ColumnWriter", "InfoRecords", "InfoSchema", "SchemaCache", "is_columns"]

INFO_COLUMNS_BASE = -2  # length words at or below this hold column-encoded infos
_WORD = 8
_MAX_KEYS = 255
# Schemas a worker remembers. An env whose keys change every step ({"episode_17": ...}) would
# otherwise grow both sides' caches without bound; past this, infos of new schemas are pickled.
MAX_SCHEMAS = 256

# The value types a column holds, with the struct format that stores them in 8 bytes and the dtype
# the parent reads them as. All are types ``VectorEnv._add_info`` batches into ``np.zeros(n, type)``.
_FORMATS: dict[type, tuple[str, str]] = {
    int: ("q", "<i8"),
    float: ("d", "<f8"),
    bool: ("?7x", "?"),
    **{t: ("q", "<i8") for t in (np.int8, np.int16, np.int32, np.int64)},
    **{t: ("Q", "<u8") for t in (np.uint8, np.uint16, np.uint32, np.uint64)},
    **{t: ("d", "<f8") for t in (np.float16, np.float32, np.float64)},
}
_PYTHON = (int, float, bool)
_TYPE_NAMES = {t: t.__name__ for t in _FORMATS}
_TYPES_BY_NAME = {name: t for t, name in _TYPE_NAMES.items()}


def is_columns(length: int) -> bool:
    """Whether an arena length word says the row holds column-encoded values."""
    return length <= INFO_COLUMNS_BASE


@dataclass(frozen=True, eq=False)
class InfoSchema:
    """The keys and value types of one kind of flat info, and how its values lie in a row."""

    keys: tuple[str, ...]
    types: tuple[type, ...]
    blob: bytes = field(init=False)  # written after the values: (keys, type names), pickled
    length: int = field(init=False)  # the arena length word of a row holding this schema
    packer: struct.Struct = field(init=False)  # the values, then the blob: one row's bytes
    dtype: np.dtype = field(init=False)  # one row's values as a structured record
    python_only: bool = field(init=False)  # every type is int, float or bool: unpacked values need no cast

    def __post_init__(self) -> None:
        blob = pickle.dumps((self.keys, tuple(_TYPE_NAMES[t] for t in self.types)), protocol=4)
        digest = int.from_bytes(hashlib.blake2b(blob, digest_size=6).digest(), "little")
        formats = [_FORMATS[t] for t in self.types]
        dtype = np.dtype(
            {
                "names": [f"f{j}" for j in range(len(self.keys))],
                "formats": [np.dtype(numpy_format) for _, numpy_format in formats],
                "offsets": [_WORD * j for j in range(len(self.keys))],
                "itemsize": _WORD * len(self.keys),
            }
        )
        object.__setattr__(self, "blob", blob)
        object.__setattr__(self, "length", INFO_COLUMNS_BASE - ((digest << 8) | len(self.keys)))
        packer = struct.Struct("<" + "".join(f for f, _ in formats) + f"{len(blob)}s")
        object.__setattr__(self, "packer", packer)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "python_only", all(t in _PYTHON for t in self.types))

    @property
    def width(self) -> int:
        """Bytes of values at the start of a row."""
        return _WORD * len(self.keys)

    def dict_at(self, arena: np.ndarray, offset: int) -> dict[str, Any]:
        """The info whose row starts ``offset`` bytes into ``arena``, each value of the type the env gave."""
        values = self.packer.unpack_from(arena, offset)  # type: ignore[arg-type]  # an ndarray is a buffer  # Python int/float/bool per key, then the blob
        if self.python_only:  # (zip stops at the last key, before the blob)
            return dict(zip(self.keys, values))
        return {key: kind(value) for key, kind, value in zip(self.keys, self.types, values)}

    @property
    def one_array_per_key(self) -> bool:
        return one_array_per_key(self.keys)

    def columns(self, records: np.ndarray) -> list[np.ndarray]:
        """Each key's values over ``records``, as stored (int64, uint64, float64 or bool)."""
        return [records[name] for name in self.dtype.names or ()]


def one_array_per_key(keys: tuple[str, ...]) -> bool:
    """Whether a dict of arrays (Gymnasium's vector info) batches these string keys one array each:
    no ``final_obs`` (an object array) and no ``_key``, whose mask could collide with a key of that
    name (those are batched env by env, from dicts)."""
    return "final_obs" not in keys and not any(key.startswith("_") for key in keys)


class InfoRecords(NamedTuple):
    """The infos of a batch of envs as columns: the ``positions`` in the batch of the envs that have
    an info, and their values, one ``records`` entry each, all written with ``schema`` (None, with
    no records, when no env has an info). A tuple: made on every step, for a third of a frozen
    dataclass's cost."""

    positions: np.ndarray
    schema: InfoSchema | None
    records: np.ndarray | None


def schema_of(keys: tuple[Any, ...], types: tuple[type, ...]) -> InfoSchema | None:
    """The schema of an info with these keys and value types, or None when it takes the pickled path."""
    if len(keys) > _MAX_KEYS or not all(type(key) is str for key in keys):
        return None
    if not all(t in _FORMATS for t in types):
        return None
    return InfoSchema(keys, types)


class ColumnWriter:
    """The worker's side: writes an info into its row as columns when it can."""

    def __init__(self) -> None:
        self._schemas: dict[tuple[tuple[Any, ...], tuple[type, ...]], InfoSchema | None] = {}

    @property
    def schemas_known(self) -> int:
        """How many key and type tuples the writer has met (at most ``MAX_SCHEMAS``)."""
        return len(self._schemas)

    def write(self, info: dict[Any, Any], arena: np.ndarray, env_index: int) -> int | None:
        """Write ``info`` into env ``env_index``'s row of ``arena``; its length word, or None when
        it must be pickled."""
        if type(info) is not dict:  # a dict subclass keeps its type through the pickled path only
            return None
        values = tuple(info.values())
        key = (tuple(info), tuple(map(type, values)))
        try:
            schema = self._schemas[key]
        except KeyError:
            if len(self._schemas) >= MAX_SCHEMAS:
                return None
            schema = self._schemas[key] = schema_of(*key)
        row_bytes = arena.shape[1]
        if schema is None or schema.packer.size > row_bytes:
            return None
        try:
            schema.packer.pack_into(arena, env_index * row_bytes, *values, schema.blob)  # type: ignore[arg-type]
        except (struct.error, OverflowError):  # an int beyond 64 bits
            return None
        return schema.length


class SchemaCache:
    """The parent's side: schemas by length word, learnt from the first row that holds each."""

    def __init__(self) -> None:
        self._by_length: dict[int, InfoSchema] = {}

    def schema(self, length: int, arena: np.ndarray, env_index: int) -> InfoSchema:
        """The schema of env ``env_index``'s row in ``arena``, whose length word is ``length``."""
        try:
            return self._by_length[length]
        except KeyError:
            pass
        keys_count = (INFO_COLUMNS_BASE - length) & 0xFF
        blob = arena[env_index, _WORD * keys_count :].tobytes()
        keys, names = pickle.loads(blob)  # bytes past the pickle are ignored
        schema = InfoSchema(tuple(keys), tuple(_TYPES_BY_NAME[name] for name in names))
        if schema.length != length:
            raise RuntimeError(f"info row holds a schema that does not match its length word {length}")
        self._by_length[length] = schema
        return schema

    def records(self, arena: np.ndarray, env_ids: Sequence[int], schema: InfoSchema) -> np.ndarray:
        """The column values of ``env_ids`` (all written with ``schema``), one record per env."""
        values = arena[np.asarray(env_ids, dtype=np.intp), : schema.width]
        return np.ascontiguousarray(values).view(schema.dtype)[:, 0]
