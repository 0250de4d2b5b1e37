#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_safetensors into fuzz_seeds/ (run once; the outputs are committed).

Small valid files that cover what the reader accepts: every float dtype it converts, integer
dtypes, scalars, empty tensors, gaps, metadata and a BERT-like header, so the fuzzer starts from
inputs that reach deep into the validation code rather than from random bytes.
"""
import json
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_seeds")


def safetensors(entries, data, metadata=None):
    header = dict(entries)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the reference writer pads the header to 8 bytes
    return struct.pack("<Q", len(text)) + text + data


def write(name, content):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(content)


os.makedirs(HERE, exist_ok=True)

f32 = struct.pack("<6f", 0.0, 1.5, -2.25, 3e-38, 1e30, -7.0)
f16 = struct.pack("<4H", 0x3C00, 0xC000, 0x0001, 0x7C00)
bf16 = struct.pack("<3H", 0x3F80, 0xC060, 0x7FC0)
write("float_dtypes.safetensors", safetensors({
    "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    "b": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]},
    "c": {"dtype": "BF16", "shape": [3, 1], "data_offsets": [32, 38]},
}, f32 + f16 + bf16, {"format": "pt"}))

write("int_scalar_empty.safetensors", safetensors({
    "ids": {"dtype": "I64", "shape": [1, 2], "data_offsets": [0, 16]},
    "scalar": {"dtype": "F32", "shape": [], "data_offsets": [16, 20]},
    "empty": {"dtype": "F16", "shape": [0, 4], "data_offsets": [20, 20]},
    "flags": {"dtype": "BOOL", "shape": [2], "data_offsets": [24, 26]},  # after a gap
}, struct.pack("<2q", 0, 1) + struct.pack("<f", 42.0) + b"\0" * 4 + b"\1\0"))

write("empty_header.safetensors", safetensors({}, b""))

hidden = 4
entries, data = {}, b""
for name, shape in [("embeddings.word_embeddings.weight", [8, hidden]),
                    ("embeddings.LayerNorm.weight", [hidden]),
                    ("encoder.layer.0.attention.self.query.weight", [hidden, hidden]),
                    ("encoder.layer.0.intermediate.dense.weight", [2 * hidden, hidden])]:
    count = 1
    for d in shape:
        count *= d
    entries[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * count]}
    data += struct.pack(f"<{count}f", *[0.01 * i for i in range(count)])
write("bert_like.safetensors", safetensors(entries, data, {"format": "pt"}))
