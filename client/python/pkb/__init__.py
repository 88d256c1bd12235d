"""Client of the ParallelKernelBench (PKB) evaluation service.

    import pkb
    with pkb.Client("coord:7311", token="...") as c:
        for event in c.submit("1_allreduce", source, world_size=8, model="my-model"):
            print(pkb.stage_name(event.stage), event.message)

The generated messages and stubs are in ``pkb.v1`` (built from the repository's proto/).
"""
from pkb.client import (DONE, OK, Client, PkbError, stage_name, status_name, to_dict)

__all__ = ["Client", "PkbError", "DONE", "OK", "stage_name", "status_name", "to_dict"]
__version__ = "0.1.0"
