"""The control plane: mutating webhook and scheduler extender (filter, bind)."""
