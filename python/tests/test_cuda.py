"""kvstash.cuda, the optional CUDA module: without it, a clear ImportError; with it and no
device, UnavailableError; on a GPU (scripts/gpu_check.sh), restores into CUDA tensors
equal to the CPU restore and a scatter/gather equal to torch indexing of vLLM's layout.
The GPU cases skip visibly without a device; the index maths itself is tested on the
CPU by tests/common/paged_kv_test.cc."""

from __future__ import annotations

import numpy as np
import pytest

import kvstash
from kvstash import _native

FP = bytes(range(32))
HAS_MODULE = hasattr(_native, "_cuda")


def raw_codec(layout, chunk):
    return kvstash.PrefixCodec.raw(layout, kvstash.PrefixCodecOptions(
        FP, chunk_tokens=chunk, tenant="pytest", kv_dtype="bf16"))


@pytest.mark.skipif(HAS_MODULE, reason="this build has the CUDA module")
def test_default_build_says_how_to_get_the_module():
    with pytest.raises(ImportError, match="KVSTASH_PYTHON_CUDA=ON"):
        import kvstash.cuda  # noqa: F401


needs_module = pytest.mark.skipif(not HAS_MODULE, reason="SKIPPED: kvstash built without its CUDA "
                                  "module (pip install ./python -C cmake.define.KVSTASH_PYTHON_CUDA=ON)")


def device():
    import kvstash.cuda as kc
    ok, why = kc.device_available()
    if not ok:
        pytest.skip(f"SKIPPED: no CUDA device ({why}); run scripts/gpu_check.sh on a GPU machine")
    return pytest.importorskip("torch")


@needs_module
def test_without_a_device_the_decoder_is_unavailable():
    import kvstash.cuda as kc
    ok, why = kc.device_available()
    if ok:
        pytest.skip("a CUDA device is present")
    assert why
    with pytest.raises(kvstash.UnavailableError):
        kc.DeviceDecoder(raw_codec(kvstash.KvLayout(2, 2, 8), 8))


@needs_module
def test_raw_restore_into_cuda_tensors_equals_the_cpu_restore():
    torch = device()
    import kvstash.cuda as kc
    codec = raw_codec(kvstash.KvLayout(3, 2, 16), 8)
    tokens = list(range(20))
    keys = codec.chain_keys(tokens)
    rng = np.random.default_rng(7)
    chunks = [rng.integers(0, 2**16, (3, 2, k.tokens, 2, 16), dtype=np.uint16) for k in keys]
    payloads = [p.payload for p in codec.encode_chunks(tokens, keys, chunks)]
    dec = kc.DeviceDecoder(codec)
    assert dec.where == "cpu"
    outs = [torch.zeros((3, 2, k.tokens, 2, 16), dtype=torch.bfloat16, device="cuda") for k in keys]
    dec.restore_chunks_into(tokens, keys, payloads, outs, torch.cuda.current_stream().cuda_stream)
    for o, c in zip(outs, chunks):
        assert np.array_equal(o.cpu().view(torch.int16).numpy().view(np.uint16), c)
    bad = bytearray(payloads[0])
    bad[-1] ^= 1
    fresh = [torch.zeros_like(o) for o in outs[:1]]
    with pytest.raises(kvstash.CorruptionError):
        dec.restore_chunks_into(tokens, keys, [bytes(bad)], fresh)
    assert int(fresh[0].view(torch.int16).abs().sum()) == 0  # nothing unverified written
    # bf16 KV into a float16 tensor would read back as other numbers: refused.
    halves = [torch.zeros_like(o, dtype=torch.float16) for o in outs]
    with pytest.raises(kvstash.InvalidArgumentError, match="element type"):
        dec.restore_chunks_into(tokens, keys, payloads, halves)


def vllm_layers(torch, n_layers, blocks, heads, block_size, head_dim, order):
    """Per-layer caches of vLLM 0.32's logical shape [N, H, B, 2D] in physical `order`."""
    logical = (blocks, heads, block_size, 2 * head_dim)
    phys = tuple(logical[i] for i in order)
    inv = [order.index(i) for i in range(4)]
    return [torch.randint(-2**15, 2**15, phys, dtype=torch.int16, device="cuda")
            .view(torch.bfloat16).permute(*inv) for _ in range(n_layers)]


@needs_module
@pytest.mark.parametrize("order", [(0, 1, 2, 3), (0, 2, 1, 3)])  # HND, NHD pages
def test_scatter_and_gather_equal_torch_indexing(order):
    torch = device()
    import kvstash.cuda as kc
    L, H, D, B, N, C = 3, 2, 8, 4, 9, 8
    layers = vllm_layers(torch, L, N, H, B, D, order)
    assert tuple(layers[0].shape) == (N, H, B, 2 * D)
    want = [x.clone() for x in layers]
    block_ids = [6, 2, 8, 0, 5]
    chunk = torch.randint(-2**15, 2**15, (L, 2, C, H, D), dtype=torch.int16, device="cuda").view(torch.bfloat16)
    first, t_begin = 8, 3  # chain chunk 1; its first 3 tokens already cached
    s = torch.cuda.current_stream().cuda_stream
    kc.scatter_chunk(chunk, layers, block_ids, first, B, t_begin=t_begin, stream=s)
    for t in range(t_begin, C):
        blk, slot = block_ids[(first + t) // B], (first + t) % B
        for layer in range(L):
            want[layer][blk, :, slot, :D] = chunk[layer, 0, t]
            want[layer][blk, :, slot, D:] = chunk[layer, 1, t]
    torch.cuda.synchronize()
    for g, w in zip(layers, want):
        assert torch.equal(g.view(torch.int16), w.view(torch.int16))
    back = torch.zeros_like(chunk)
    kc.gather_chunk(layers, block_ids, first, B, back, t_begin=t_begin, stream=s)
    torch.cuda.synchronize()
    assert torch.equal(back[:, :, t_begin:].view(torch.int16), chunk[:, :, t_begin:].view(torch.int16))
    assert int(back[:, :, :t_begin].view(torch.int16).abs().sum()) == 0
    with pytest.raises(kvstash.InvalidArgumentError):
        kc.scatter_chunk(chunk, layers, [6, 2, 99, 0, 5], first, B)  # block 99 of 9
    with pytest.raises(kvstash.InvalidArgumentError):
        kc.scatter_chunk(chunk, layers, block_ids[:2], first, B)  # table too short


@needs_module
def test_spec_restore_on_the_gpu_equals_the_cpu_restore(model_path, tmp_path):
    torch = device()
    import os

    import kvstash.cuda as kc
    from conftest import ROOT
    ref = kvstash.ReferenceModel.load(model_path)
    with open(os.path.join(ROOT, "docs/format/keys.md"), encoding="utf-8") as f:
        tokens = ref.tokenize(f.read())[:2 * 64 + 37]
    with open(os.path.join(ROOT, "docs/protocol.md"), encoding="utf-8") as f:
        doc = ref.tokenize(f.read())[:128]
    art = str(tmp_path / "spec.kvsa")
    assert ref.calibrate_spec([doc], art, chunk_tokens=64) > 0
    codec = kvstash.PrefixCodec.spec(model_path, art, kvstash.PrefixCodecOptions(
        FP, chunk_tokens=64, tenant="pytest"), threads=2)
    kv = ref.prefill_kv(tokens)
    keys = codec.chain_keys(tokens)
    chunks, b = [], 0
    for k in keys:
        chunks.append(np.ascontiguousarray(kv[:, :, b:b + k.tokens]))
        b += k.tokens
    payloads = [p.payload for p in codec.encode_chunks(tokens, keys, chunks)]
    dec = kc.DeviceDecoder(codec)
    assert dec.where == "gpu"
    L, _, _, H, D = kv.shape
    outs = [torch.zeros((L, 2, k.tokens, H, D), dtype=torch.bfloat16, device="cuda") for k in keys]
    dec.restore_chunks_into(tokens, keys, payloads, outs)
    for o, c in zip(outs, codec.restore_chunks(tokens, keys, payloads)):
        assert np.array_equal(o.cpu().view(torch.int16).numpy().view(np.uint16), c)
    bad = bytearray(payloads[1])
    bad[len(bad) // 2] ^= 0x10
    with pytest.raises(kvstash.CorruptionError):
        dec.restore_chunks_into(tokens, keys, [payloads[0], bytes(bad)], outs[:2])
