"""kvstash_vllm.cuda_layout: the load plan (which chunk tokens go to which blocks, on the
CPU), the start-up error when kvstash has no CUDA module, and on a GPU a load and a save
through the CUDA module against torch indexing of vLLM's CUDA layout (skipped visibly
without a device or without the module; scripts/gpu_check.sh says how to run them).

Run: .venv-vllm/bin/python -m pytest -q engines/vllm/tests/test_cuda_layout.py  (< 5 s)
"""
import pytest
import torch

from kvstash_vllm.cuda_layout import CudaPagedKv, cuda_module, kernel_block_ids, scatter_plan
from kvstash_vllm.layout import LayoutError


def test_scatter_plan_matches_the_cpu_rule():
    # 256-token chunks of 16-token blocks (16 blocks each): 3 chunks, first 20 blocks cached.
    assert scatter_plan(20, 3, 256, 16) == [(1, 256, 64), (2, 512, 0)]
    assert scatter_plan(0, 2, 256, 16) == [(0, 0, 0), (1, 256, 0)]
    assert scatter_plan(32, 2, 256, 16) == []          # everything already cached
    assert scatter_plan(3, 1, 8, 2) == [(0, 0, 6)]      # 4 blocks of 2: the last one only


def test_kernel_block_ids_split_manager_blocks():
    assert kernel_block_ids([3, 0, 5], 1) == [3, 0, 5]
    # 64-token manager blocks as 16-token kernel blocks: block 3 = kernel blocks 12..15.
    assert kernel_block_ids([3, 0], 4) == [12, 13, 14, 15, 0, 1, 2, 3]


def _module_or_none():
    try:
        import kvstash.cuda as kc
        return kc
    except ImportError:
        return None


@pytest.mark.skipif(_module_or_none() is not None, reason="this kvstash has its CUDA module")
def test_missing_cuda_module_is_a_clear_start_up_error():
    with pytest.raises(LayoutError, match="KVSTASH_PYTHON_CUDA=ON"):
        cuda_module()


def _gpu():
    kc = _module_or_none()
    if kc is None:
        pytest.skip("SKIPPED: kvstash built without its CUDA module "
                    "(pip install ./python -C cmake.define.KVSTASH_PYTHON_CUDA=ON)")
    ok, why = kc.device_available()
    if not ok or not torch.cuda.is_available():
        pytest.skip(f"SKIPPED: no CUDA device ({why}); run scripts/gpu_check.sh on a GPU machine")
    return kc


def test_load_and_save_on_cuda_caches():
    _gpu()
    import numpy as np

    import kvstash
    L, H, D, B, C, N = 2, 2, 8, 4, 8, 10
    codec = kvstash.PrefixCodec.raw(kvstash.KvLayout(L, H, D), kvstash.PrefixCodecOptions(
        bytes(32), chunk_tokens=C, tenant="t", kv_dtype="bf16"))
    tokens = list(range(2 * C))
    keys = codec.chain_keys(tokens)
    rng = np.random.default_rng(5)
    chunks = [rng.integers(0, 2**16, (L, 2, C, H, D), dtype=np.uint16) for _ in keys]
    payloads = [p.payload for p in codec.encode_chunks(tokens, keys, chunks)]
    # NHD pages: physical [N, B, H, 2D], logical view [N, H, B, 2D] as vLLM registers it.
    layers = [torch.zeros((N, B, H, 2 * D), dtype=torch.bfloat16, device="cuda").permute(0, 2, 1, 3)
              for _ in range(L)]
    paged = CudaPagedKv.create(layers, B, C, torch.bfloat16)
    block_ids = [7, 1, 9, 4]
    paged.load(codec, tokens, keys, payloads, block_ids, first_block=1, n_chunks=2)
    for p in range(B, 2 * C):  # block table entry 0 was cached already: left zero
        blk, slot, j, t = block_ids[p // B], p % B, p // C, p % C
        want = torch.from_numpy(chunks[j][:, :, t].view(np.int16)).to("cuda")  # [L, 2, H, D]
        for layer in range(L):
            got = layers[layer][blk, :, slot].view(torch.int16)  # [H, 2D]
            assert torch.equal(got[:, :D], want[layer, 0]) and torch.equal(got[:, D:], want[layer, 1])
    assert int(layers[0][7].view(torch.int16).abs().sum()) == 0
    saved = paged.gather(block_ids[1:3])  # tokens 4..11 -> host [L, 2, 8, H, D]
    assert saved.device.type == "cpu"
    ref = np.concatenate([chunks[0][:, :, 4:], chunks[1][:, :, :4]], axis=2)
    assert np.array_equal(saved.view(torch.int16).numpy().view(np.uint16), ref)
    with pytest.raises(LayoutError):
        CudaPagedKv.create([layers[0].to(torch.float16)], B, C, torch.bfloat16)
    with pytest.raises(LayoutError):
        CudaPagedKv.create(layers, 6, C, torch.bfloat16)  # 4-token blocks do not divide 6


def test_kernel_blocks_smaller_than_the_scheduler_blocks():
    _gpu()
    import numpy as np

    import kvstash
    L, H, D, C, N = 1, 2, 8, 8, 12  # scheduler blocks of 4 tokens, kernel blocks of 2
    codec = kvstash.PrefixCodec.raw(kvstash.KvLayout(L, H, D), kvstash.PrefixCodecOptions(
        bytes(32), chunk_tokens=C, tenant="t", kv_dtype="bf16"))
    tokens = list(range(C))
    keys = codec.chain_keys(tokens)
    chunk = np.random.default_rng(9).integers(0, 2**16, (L, 2, C, H, D), dtype=np.uint16)
    payloads = [p.payload for p in codec.encode_chunks(tokens, keys, [chunk])]
    layers = [torch.zeros((N, H, 2, 2 * D), dtype=torch.bfloat16, device="cuda")]
    paged = CudaPagedKv.create(layers, 4, C, torch.bfloat16)
    assert (paged.KB, paged.ratio) == (2, 2)
    paged.load(codec, tokens, keys, payloads, [5, 2], first_block=0, n_chunks=1)
    for t in range(C):  # manager block [5, 2][t // 4] -> kernel block 2 * that + (t % 4) // 2
        kblk, slot = 2 * [5, 2][t // 4] + (t % 4) // 2, t % 2
        got = layers[0][kblk, :, slot].view(torch.int16).cpu().numpy().view(np.uint16)
        assert np.array_equal(got[:, :D], chunk[0, 0, t]) and np.array_equal(got[:, D:], chunk[0, 1, t])
    saved = paged.gather([5, 2])
    assert np.array_equal(saved.view(torch.int16).numpy().view(np.uint16), chunk)
