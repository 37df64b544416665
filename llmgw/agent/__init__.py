"""`llmgw agent`: a node of the cluster. It reports what the node has, fetches weights, and runs engines.

discovery/ (what the node has), weights/ (fetching and checking model files),
supervisor/ (running engines as child processes; each engine's command line
is llmgw/engines, which the control plane's catalog checks models with too),
link.py (the connection to the leader), shards.py (what a StartShard sets
going), agent.py (all of it together).
"""
