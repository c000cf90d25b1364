"""The end-to-end demo on a simulated cluster (`hami-sim demo`, `hami-sim cluster up`) and the
tour of the simulated GPUs (`hami-sim demo --gpu-tour`); docs/demo.md."""
