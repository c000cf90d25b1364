"""Replay of Alibaba's GPU-sharing trace through the placement engine, the way the FGD paper's
simulator measured (see docs/placement.md)."""
