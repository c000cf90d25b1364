"""Preemption between GPU-slice pods: holds, the filter-side trigger, eviction."""
