"""Peer trainers for bench/cluster_bench.py: the same data, model, batch and optimizer
as ``gmp train``, trained by plain PyTorch DDP (sparse ``nn.EmbeddingBag`` gradients)
and by TorchRec (optional ``peers`` extra). Each is a torchrun script that writes one
JSON result; none is imported by gmp itself."""
