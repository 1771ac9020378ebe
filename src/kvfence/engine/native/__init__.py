"""The native runtime: the engine's forward pass on the CPU without torch (numpy and the C++ kernels
of :mod:`kvfence.engine.kernels` through ctypes), for a smaller resident memory than torch's.

- ``runtime.py``: :class:`~.runtime.NativeRuntime`, what the engine builds the runner, generators and
  sampler from (``runtime="native"``); ``sampler.py``: the NumPy sampler;
- ``runner.py``: :class:`NativeRunner`, the surface of :class:`~kvfence.engine.runner.model_runner.ModelRunner`
  the engine loop uses: the KV pool, its scrubbing (I2) and one step's forward pass;
- ``weights.py``: a safetensors checkpoint read straight into numpy arrays in the model dtype, q/k/v
  and gate/up fused; what the runtime does not run is a :class:`~kvfence.errors.ConfigError`;
- ``rope.py``: RoPE's cos/sin rows, as :mod:`kvfence.engine.layers.rotary` computes them (every
  scaling type but LongRoPE; dynamic NTK per sequence length);
- ``kernels.py``: the kernel library, built and self-checked without torch;
- ``memory.py``: the weights and the pool on transparent huge pages, as the torch runtime places them;
- ``dtypes.py``: float32 / bfloat16 / float16 as numpy stores them, rounded as torch rounds.

No module here imports torch.
"""
