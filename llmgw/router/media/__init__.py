"""Pictures and workflows on ComfyUI replicas: `/v1/images/generations` for a ComfyUI model (images.py), the
workflow made from a run's values and sent to a replica (runs.py), and the inputs that are files (inputs.py)."""
