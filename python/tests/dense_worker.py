"""One worker process of test_two_workers_bsp_mean_equal_averaged_gradient (the coordinator
counts workers by process): trains the DenseProblem of its rank, saves the weights."""
import sys

import numpy as np
import torch

import osprey
import osprey.torch as ot

sys.path.insert(0, __import__("os").path.dirname(__file__))
from test_embedding_exact import DenseProblem, STEPS  # noqa: E402

config, out_path = sys.argv[1], sys.argv[2]
client = osprey.connect(config=config)
problem = DenseProblem(client.table("mlp").size, client.world_size)
w = torch.nn.Parameter(problem.init.clone())
opt = ot.DenseOptimizer([w], client.table("mlp"))
for s in range(STEPS):
    opt.zero_grad()
    problem.worker_loss(w, client.rank, s).backward()
    opt.step()
np.save(out_path + f".{client.rank}.npy", w.detach().numpy())
client.close()
