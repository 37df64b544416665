"""Engines as child processes: started, watched, stopped, and adopted by the next agent.

    sup = Supervisor(data_dir, on_status=send)      # send(ShardStatus) to the leader
    await sup.adopt()                               # what a previous agent left running
    shard = await sup.start(EngineSpec(shard_id, command, model, url, port=port, env=env))
    sup.logs(shard_id, 200)                         # list[LogLine]
    await sup.stop(shard_id, grace_s=30)            # ShardStatus, stopped with its exit code

Each engine runs in a process group and session of its own, as the
`llmgw-engine` user when the agent is root; its stdout and stderr go to a
file per shard that the agent follows into a bounded ring (output.py says
why a file); a record per shard on disk (records.py) lets a restarted agent
adopt what still runs instead of starting it twice. Stopping signals the
group and every descendant that left it (procs.py), then kills after a
grace. The modules: ring.py (the output kept), output.py (the file),
records.py (the record), procs.py (which processes are the engine's),
users.py (who engines run as), readiness.py (when an engine is ready),
shard.py (one engine's state and watchers), supervisor.py (all of them).
"""

from llmgw.agent.supervisor.records import RecordError
from llmgw.agent.supervisor.ring import OutputLimits
from llmgw.agent.supervisor.shard import Shard
from llmgw.agent.supervisor.supervisor import EngineSpec, Supervisor
from llmgw.agent.supervisor.users import DEFAULT_USER, UserError

__all__ = ["DEFAULT_USER", "EngineSpec", "OutputLimits", "RecordError", "Shard", "Supervisor", "UserError"]
