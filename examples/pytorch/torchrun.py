#!/usr/bin/env python3
"""torchrun for Debian 12's python3-torch 1.13 on Python 3.11.

Debian ships /usr/bin/torchrun, but torch 1.13's launcher cannot run on
Python 3.11: Std.from_str("0") (the default of --redirects and --tee)
returns None, because iterating an IntFlag no longer yields its zero or
multi-bit members, and the launcher then fails with "AttributeError:
'NoneType' object has no attribute 'get'" before starting a worker (the
same failure as meta-llama/llama#86). This wrapper fixes that one
conversion and runs torch.distributed.run unchanged, with the same flags
(torch 1.13 spells them with underscores: --nproc_per_node, --master_addr,
--master_port):

    python3 examples/pytorch/torchrun.py --nnodes 1 --nproc_per_node 2 \\
        --master_addr 127.0.0.1 --master_port 29500 examples/pytorch/train.py --data DIR

On a torch whose Std.from_str already works the patch changes nothing.
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api
from torch.distributed.run import main


def _std_from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


if api.Std.from_str("0") is None:
    api.Std.from_str = classmethod(_std_from_str)

if __name__ == "__main__":
    sys.exit(main())
