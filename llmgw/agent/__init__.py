"""`llmgw agent`: a node of the cluster. It reports what the node has, fetches weights, and runs engines.

discovery/ (what the node has), weights/ (fetching and checking model files),
engines/ (each engine's command line), supervisor/ (running them as child
processes), link.py (the connection to the leader), shards.py (what a
StartShard sets going), agent.py (all of it together).
"""
