"""A tune factory for code AST graphs (``graphbatch data build code``): graphbatch's MPEU with
the AST node type as the node embedding and no geometry (every position 0, so every edge's
distance features are those of distance 0; the step computes exactly what MPEU computes),
regressing log(1 + nodes) per graph.

    graphbatch tune code.h5 --model examples.tune_code_mpeu:factory

(run from the repository root, or put the module on ``PYTHONPATH``; docs/tune.md)."""

import torch

import graphbatch.torch as gt
from graphbatch.datasets import AST_NODE_TYPES
from graphbatch.models import MPEU


def factory(*, device, compile, source):
    torch.manual_seed(0)
    model = MPEU(num_embeddings=len(AST_NODE_TYPES)).to(device)
    fn = torch.compile(model, dynamic=False, fullgraph=True) if compile else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(batch):
        b = batch.to(device)
        opt.zero_grad(set_to_none=True)
        z = b.node_type.view(-1).long()
        pos = torch.zeros(z.shape[0], 3, device=z.device)
        out = fn(z, pos, b.edge_index, b.batch, b.node_mask, b.edge_mask, int(b.num_graphs))
        # a target every AST graph has: log(1 + its number of nodes)
        nodes = torch.zeros_like(out).index_add_(0, b.batch, b.node_mask.to(out.dtype))
        target = torch.log1p(nodes)
        loss = gt.masked_mean((out - target) ** 2, b.graph_mask)
        loss.backward()
        opt.step()
        return loss

    return step
