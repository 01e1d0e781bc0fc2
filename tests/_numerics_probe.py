"""A small computation that goes through every library the numerics pin fixes; prints its digest as JSON.

Run as a script (``python tests/_numerics_probe.py [pin|plain]``): with ``pin`` it runs under the pin as every
``coda`` command does (`coda.numerics.pin_process` re-executes it when it did not start pinned); with
``plain`` it runs under whatever the environment says. The digest covers ATen's kernels (`torch.randn`,
GELU, LayerNorm, softmax, attention, fused AdamW), MKL's GEMM, NumPy's transcendental ufuncs and glibc's
libm (`math.sin`), through a few training steps of the chunk critic and the regression policy.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys

if sys.argv[1:] == ["pin"]:
    from coda import numerics

    numerics.pin_process()
else:
    import os

    os.environ["CODA_NUMERICS"] = "native"  # `import coda` must not set the variables either
    from coda import numerics

import numpy as np  # noqa: E402
import torch  # noqa: E402

numerics.pin_torch(2)

from coda.learn.critic import ChunkCritic  # noqa: E402
from coda.learn.policies import make_policy  # noqa: E402
from coda.sim.world import OBS_DIM  # noqa: E402

digest = hashlib.sha256()
gen = torch.Generator().manual_seed(0)
critic, policy = ChunkCritic(), make_policy("regression", obs_dim=OBS_DIM)
params = list(critic.parameters()) + list(policy.parameters())
opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
for _ in range(3):
    obs, instr = torch.randn(64, OBS_DIM, generator=gen), torch.randn(64, 384, generator=gen)
    chunks = policy.sample(obs, instr, 8, generator=gen)
    loss = critic(obs, instr, chunks).softmax(-1).square().sum() + policy.mean_chunk(obs, instr).abs().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
for p in params:
    digest.update(p.detach().numpy().tobytes())
x = np.linspace(0.0, 50.0, 4099)
digest.update(np.sin(x).tobytes() + np.exp(-x).tobytes() + (x.reshape(1, -1) @ x.reshape(-1, 1)).tobytes())
digest.update(repr([math.sin(i * 0.37) for i in range(20000)]).encode())
print(json.dumps({"digest": digest.hexdigest(), "numerics": numerics.in_force()}))
