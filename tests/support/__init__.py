"""The test kit: real processes and clusters for tests to start, and waits on what they can observe.

servers      `llmgw server` processes (Server), sim-engines (SimEngine), `llmgw …` commands (llmgw), configs
agents       `llmgw agent` processes joined to a server (AgentProcess)
simengines   sim-engines on a port they choose themselves, read from the line they print (Sim)
pgcluster    a throwaway PostgreSQL server (PgCluster) and free loopback ports (free_port)
storemachines  the three-machine store from the files llmgw writes: three etcd, PostgreSQL under Patroni (StoreMachines)
waiting      wait_until: poll what a test can observe, and fail with a sentence naming what never happened
processes    end: stop a child by its PID, SIGKILL after a grace
rewordings   forty rewordings of one question, for the similar-answer cache
hfhub        a Hugging Face hub (Hub): repositories the test makes, served as llmgw and huggingface_hub read them

A starter that waits for its child (Server.start, SimEngine.start, Sim.start,
PgCluster, StoreMachines) fails at once when the child dies, with what it said.

Imported as `tests.support.…` (the repository's root is on pytest's path through
setup.cfg's `pythonpath`), never through sys.path edits.
"""
