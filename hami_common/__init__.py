"""Wire formats shared by the node agent, the control plane and the doubles."""
