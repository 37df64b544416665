"""Pictures and workflows on ComfyUI replicas: `/v1/images/generations` for a ComfyUI model (images.py), the
workflow made from a run's values and sent to a replica (runs.py), and the inputs that are files (inputs.py)."""

# The files a picture or a run leaves in a project, kept for router.jobs.retain_days (the job runner's sweep), not
# router.batch.retain_days: a picture answered as a url, a run's output, a picture a run was sent inline.
IMAGE_PURPOSE = "image_generation"
OUTPUT_PURPOSE = "workflow_output"
INPUT_PURPOSE = "workflow_input"
MEDIA_PURPOSES = (IMAGE_PURPOSE, OUTPUT_PURPOSE, INPUT_PURPOSE)
