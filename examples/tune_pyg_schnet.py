"""A tune factory for PyG's stock SchNet (``graphbatch tune STORE --model
examples.tune_pyg_schnet:factory``; run from the repository root, or put the module on
``PYTHONPATH``). See docs/tune.md for the protocol."""

import torch
from torch_geometric.nn.models import SchNet

import graphbatch.torch as gt


def factory(*, device, compile, source):
    torch.manual_seed(0)
    model = SchNet(hidden_channels=64, num_filters=64, num_interactions=3, cutoff=6.0,
                   interaction_graph=gt.batch_edges).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def forward(batch):
        with gt.padding_masks(batch):  # batch_edges reads the padded batch's edges
            return model(batch.z, batch.pos, batch.batch)[:, 0]

    fwd = torch.compile(forward, dynamic=False) if compile else forward

    def step(batch):
        batch = batch.to(device)
        opt.zero_grad(set_to_none=True)
        loss = gt.masked_mean((fwd(batch) - batch.y[:, 0]) ** 2, batch.graph_mask)
        loss.backward()
        opt.step()
        return loss

    return step
