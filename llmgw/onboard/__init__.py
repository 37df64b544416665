"""Setting up: a new control plane, a new node, join codes, units, firewall."""
