#!/usr/bin/env python3
"""Independent reference for docs/DESIGN.md section 3 (names and hashes).

Computes the fixed vectors that tests/test_key.c and tests/test_geometry.c
check, with Python's hashlib BLAKE2b rather than libb2, so the C code is
checked against a second implementation of the same text. Run it to print
the vectors; they were computed once and are committed in the tests.
"""
import hashlib
import struct


def b2(data, size, key=b""):
    return hashlib.blake2b(data, digest_size=size, key=key).digest()


def model_identity(name):
    return b2(b"selene-model-v1" + name.encode(), 32)


def namespace_identity(model, mode):
    return b2(b"flare-prefix-state-v1" + model + bytes([mode]), 32)


def tokens_le(tokens):
    return b"".join(struct.pack("<I", t) for t in tokens)


def block_digests(model, tokens):
    d = [bytes(16)]
    for k in range(len(tokens) // 64):
        d.append(b2(d[-1] + tokens_le(tokens[64 * k:64 * k + 64]), 16, model))
    return d


def key_at(model, tokens, c):
    d = block_digests(model, tokens)
    b = c // 64
    return b2(d[b] + tokens_le(tokens[64 * b:c]) + struct.pack("<Q", c), 16, model)


def layout_digest(page_tokens, planes, row):
    data = struct.pack("<II", page_tokens, len(planes))
    for name, size in sorted(planes) + [row]:
        data += struct.pack("<I", len(name)) + name.encode() + struct.pack("<Q", size)
    return b2(data, 16)


def shard_fingerprint(layout, rank, world):
    return b2(b"selene-shard-v1" + layout + struct.pack("<II", rank, world), 16)


def main():
    model = model_identity("test-model")
    print("model test-model", model.hex())
    for mode in range(3):
        print("namespace mode", mode, namespace_identity(model, mode).hex())
    tokens = [(i * 7 + 3) % 151936 for i in range(200)]
    d = block_digests(model, tokens)
    for k, digest in enumerate(d):
        print("block", k, digest.hex())
    for c in (1, 63, 64, 65, 130, 200):
        print("key", c, key_at(model, tokens, c).hex())
    planes = [("v", 8192), ("k", 8192), ("idx", 520)]
    layout = layout_digest(64, planes, ("state", 70000))
    print("layout", layout.hex())
    print("fingerprint 1/4", shard_fingerprint(layout, 1, 4).hex())


if __name__ == "__main__":
    main()
